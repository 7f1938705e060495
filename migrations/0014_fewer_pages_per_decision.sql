-- effectfence ledger, schema version 14: a decision dirties fewer pages.
--
-- A decision's cost is the pages its transaction dirties: each page is
-- written to the log and later copied into the file. Three indexes keyed by
-- intent name put one random page each into every decision whatever else it
-- wrote (the events' and the certificates' by intent, and the certificates'
-- (domain, seq)), and a certificate stored its intent, domain, seq,
-- generation, parent, agent and tool twice: as columns and in its hashed
-- body. Measured with effectfence_layout_bench (docs/BENCHMARK_HISTORY.md):
-- 3.29 / 5.09 log pages per decision (ordered / scattered names) before,
-- 2.32 / 2.75 after.
--
-- - certificates keep hash, body and committed_at; the other columns are
--   generated from the body (VIRTUAL: computed when read, never stored), so
--   every query that reads them reads what it read before. A row id orders
--   them as they were committed.
-- - events name their intent also by the intent row's rowid (intent_id),
--   and are indexed by that: it grows at one end whatever the names. An
--   event of an intent that has no row (swept before this migration, or a
--   commit for an unknown name) carries minus the id of the first event of
--   that name, so its events still group together. Readers look events up
--   by (intent_id, intent): a rowid SQLite gives again after a sweep cannot
--   mix two names.
-- - A sweep keeps each swept intent's name and rowid in swept_intents, so
--   the admission that issued a ticket is found after its intent was swept.
-- - No index by intent or by (domain, seq) on certificates: they are found
--   by hash, and an intent's through its committed events; the domain row
--   hands out each seq once, and verify still reports a seq used twice.
--
-- Refused, with the ledger left as it was: a certificate whose columns
-- disagree with its body (a hand edit; effectfence verify names it).
PRAGMA legacy_alter_table = ON;

-- First what schema 14 adds: a ledger whose version was set back by hand
-- meets "already exists" and is refused as it is. A swept intent's name
-- and its row's rowid, kept by the sweep (off the decisions' path) so that
-- a late commit of a swept attempt still finds the admission that issued
-- its ticket, by name, without an index by name on the events.
CREATE TABLE swept_intents (
  intent    TEXT NOT NULL,
  intent_id INTEGER NOT NULL,
  PRIMARY KEY (intent, intent_id)
) STRICT, WITHOUT ROWID;

CREATE TEMP TABLE schema_14_refusals (
  certificate TEXT CONSTRAINT "effectfence: schema 14 moves a certificate's columns into its body, and a certificate's intent, domain, seq, generation, parent, agent or tool disagrees with its body: nothing was changed. Run effectfence verify to see which, and restore the ledger from a backup" CHECK (certificate IS NULL)
);
INSERT INTO schema_14_refusals
SELECT hash FROM certificates
 WHERE CASE WHEN json_valid(body) THEN
         intent IS NOT json_extract(body, '$.intent') OR domain IS NOT json_extract(body, '$.domain') OR
         seq IS NOT json_extract(body, '$.seq') OR generation IS NOT json_extract(body, '$.generation') OR
         parent IS NOT json_extract(body, '$.parent') OR agent IS NOT json_extract(body, '$.agent') OR
         tool IS NOT json_extract(body, '$.tool')
       ELSE 1 END;
DROP TABLE schema_14_refusals;

-- Certificates, rebuilt: renamed aside (the triggers and views that name
-- certificates keep naming it, and so name the new table), copied with
-- their row ids, the old copy dropped with its indexes and triggers.
ALTER TABLE certificates RENAME TO certificates_v13;
CREATE TABLE certificates (
  id           INTEGER PRIMARY KEY,           -- commit order
  hash         TEXT NOT NULL UNIQUE,          -- SHA-256 of body
  body         TEXT NOT NULL,
  committed_at INTEGER NOT NULL,
  intent       TEXT GENERATED ALWAYS AS (json_extract(body, '$.intent')) VIRTUAL,
  domain       TEXT GENERATED ALWAYS AS (json_extract(body, '$.domain')) VIRTUAL,
  seq          INTEGER GENERATED ALWAYS AS (json_extract(body, '$.seq')) VIRTUAL,
  generation   INTEGER GENERATED ALWAYS AS (json_extract(body, '$.generation')) VIRTUAL,
  parent       TEXT GENERATED ALWAYS AS (json_extract(body, '$.parent')) VIRTUAL,
  agent        TEXT GENERATED ALWAYS AS (json_extract(body, '$.agent')) VIRTUAL,
  tool         TEXT GENERATED ALWAYS AS (json_extract(body, '$.tool')) VIRTUAL
) STRICT;
INSERT INTO certificates (id, hash, body, committed_at)
SELECT rowid, hash, body, committed_at FROM certificates_v13 ORDER BY rowid;
DROP TABLE certificates_v13;
CREATE INDEX certificates_by_time ON certificates(committed_at);

CREATE TRIGGER certificates_immutable_update BEFORE UPDATE ON certificates
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable'); END;
CREATE TRIGGER certificates_immutable_delete BEFORE DELETE ON certificates
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.committed_at < a.before_ms)
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
  OR EXISTS (SELECT 1 FROM domains WHERE head = OLD.hash)
  OR EXISTS (SELECT 1 FROM intents WHERE (state = 'in_flight' OR state = 'unknown') AND parent = OLD.hash)
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable; only effectfence archive moves old ones out, into a segment it has written first'); END;
-- REPLACE (INSERT OR REPLACE, REPLACE INTO) deletes the row in its way, met
-- by hash or by row id, without firing DELETE triggers, so an INSERT may
-- not take an existing row's place.
CREATE TRIGGER certificates_immutable_replace BEFORE INSERT ON certificates
WHEN EXISTS (SELECT 1 FROM certificates WHERE hash = NEW.hash)
  OR EXISTS (SELECT 1 FROM certificates WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable: this hash or id is already recorded'); END;

-- Events, rebuilt the same way with intent_id beside intent, filled in
-- for the rows already there; ids and their high-water mark kept.
ALTER TABLE events RENAME TO events_v13;
CREATE TABLE events (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  at         INTEGER NOT NULL,
  kind       TEXT NOT NULL CHECK (kind = 'admitted' OR kind = 'takeover' OR kind = 'committed' OR
                                  kind = 'aborted' OR kind = 'commit_refused' OR kind = 'holder_dead' OR
                                  kind = 'fenced_on_exit' OR kind = 'cleared' OR kind = 'swept' OR
                                  kind = 'domain_evicted'),
  intent     TEXT,
  intent_id  INTEGER,                         -- the intent's rowid (see above)
  domain     TEXT,
  seq        INTEGER,
  generation INTEGER,
  actor      TEXT NOT NULL,                   -- agent, operator, or process (host:pid)
  detail     TEXT NOT NULL DEFAULT '{}'       -- JSON: reason, certificate, result of a refused commit
) STRICT;
INSERT INTO events (id, at, kind, intent, intent_id, domain, seq, generation, actor, detail)
SELECT id, at, kind, intent,
       CASE WHEN intent IS NULL THEN NULL
            ELSE coalesce((SELECT i.rowid FROM intents i WHERE i.intent = e.intent),
                          -(SELECT min(f.id) FROM events_v13 f WHERE f.intent = e.intent)) END,
       domain, seq, generation, actor, detail
  FROM events_v13 e ORDER BY id;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'events_v13')
 WHERE name = 'events' AND seq < (SELECT seq FROM sqlite_sequence WHERE name = 'events_v13');
DROP TABLE events_v13;
DELETE FROM sqlite_sequence WHERE name = 'events_v13';
CREATE INDEX events_by_intent ON events(intent_id);
CREATE INDEX events_by_time ON events(at);
-- Only evictions are looked up by domain (to never reuse their numbers).
CREATE INDEX events_evicted_domains ON events(domain) WHERE kind = 'domain_evicted';
-- The last sweep is looked up when a done intent is deleted.
CREATE INDEX events_sweeps ON events(id) WHERE kind = 'swept';
-- The names already swept, and the rowids their events carry.
INSERT INTO swept_intents (intent, intent_id)
SELECT DISTINCT intent, intent_id FROM events WHERE intent_id < 0;

CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.at < a.before_ms)
  OR OLD.intent IS NULL
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only; only effectfence archive moves old events out, into a segment it has written first'); END;
-- Against REPLACE, as for certificates. effectfence inserts events without an
-- id (NEW.id is then -1 here, never an existing row): one rowid lookup.
CREATE TRIGGER events_append_only_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only: this event id is already recorded'); END;
-- The triggers that look an intent's events up, by its row now. SQLite
-- runs a table's triggers newest first, and which one refuses a hand edit
-- decides the advice it gets: the triggers created after the first of
-- these are created again after it, in their order.
DROP TRIGGER intents_cleared_through_clears;
DROP TRIGGER intents_results_kept;
DROP TRIGGER intents_holder_kept;
DROP TRIGGER intents_done_kept;
DROP TRIGGER intents_follow_state_machine;
DROP TRIGGER intents_in_flight_fenced_with_event;
CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'cleared' AND OLD.state IS NOT 'cleared' AND (NOT EXISTS (
  SELECT 1 FROM clears
   WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state) OR NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent_id = OLD.rowid AND intent = NEW.intent AND kind = 'cleared' AND at = NEW.updated_at AND
         generation = OLD.generation))
BEGIN SELECT RAISE(ABORT, 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited'); END;
CREATE TRIGGER intents_results_kept BEFORE DELETE ON intents
WHEN OLD.state = 'done' AND NOT EXISTS (
  SELECT 1 FROM (SELECT at, json_extract(detail, '$.older_than_ms') AS cutoff
                   FROM events WHERE kind = 'swept' ORDER BY id DESC LIMIT 1) AS sweep
   WHERE sweep.cutoff > OLD.updated_at
     AND sweep.cutoff + (SELECT value FROM retention WHERE name = 'result_ttl_ms') <= sweep.at)
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent replays its result to late duplicates until the result TTL is over; deleted sooner, its next prepare would be fresh and its effect could run again. Sweep finished intents as docs/OPERATIONS.md shows: a swept event first, whose older_than_ms is at least the result TTL before its time'); END;
CREATE TRIGGER intents_holder_kept BEFORE UPDATE OF
  generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at ON intents
WHEN NEW.generation < OLD.generation OR (NEW.generation = OLD.generation AND (
     NEW.token IS NOT OLD.token OR NEW.holder_host IS NOT OLD.holder_host OR
     NEW.holder_boot IS NOT OLD.holder_boot OR NEW.holder_pid IS NOT OLD.holder_pid OR
     NEW.holder_started IS NOT OLD.holder_started OR NEW.lease_expires_at < OLD.lease_expires_at)) OR
     (NEW.generation > OLD.generation AND NOT (NEW.token IS NOT OLD.token AND NEW.state = 'in_flight' AND
                                              NEW.admitted_at = NEW.updated_at))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt''s holder, token, generation and lease change only when it is admitted again: taken over early, its tool could run twice. Wait for the lease to run out; if its holder is gone, the next prepare fences it for an operator'); END;
CREATE TRIGGER intents_done_kept BEFORE UPDATE ON intents
WHEN OLD.state = 'done'
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent cannot be changed: its effect ran, and its result replays to late duplicates until a sweep deletes it'); END;
CREATE TRIGGER intents_follow_state_machine BEFORE UPDATE OF state ON intents
WHEN NEW.state IS NOT OLD.state AND NEW.state IS NOT 'cleared' AND OLD.state IS NOT 'done' AND NOT (
  (OLD.state = 'cleared' AND NEW.state = 'in_flight') OR
  (OLD.state = 'in_flight' AND NEW.state = 'done') OR
  (OLD.state = 'unknown' AND NEW.state = 'done') OR
  (OLD.state = 'cleared' AND NEW.state = 'done') OR
  (OLD.state = 'in_flight' AND NEW.state = 'failed') OR
  (OLD.state = 'unknown' AND NEW.state = 'failed') OR
  (OLD.state = 'in_flight' AND NEW.state = 'unknown') OR
  (OLD.state = 'failed' AND NEW.state = 'cleared') OR
  (OLD.state = 'unknown' AND NEW.state = 'cleared'))
BEGIN SELECT RAISE(ABORT, 'effectfence: a failed or unknown intent stays fenced until it is cleared: reconcile it, then INSERT INTO clears(intent, operator, reason); a cleared one moves only as a prepare admits it again or its holder commits (the fence''s state machine has no such move; docs/DESIGN.md lists them)'); END;
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
WHEN ((OLD.state = 'in_flight' AND (NEW.state = 'failed' OR NEW.state = 'unknown')) OR
      (OLD.state = 'unknown' AND NEW.state = 'failed')) AND NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent_id = OLD.rowid AND intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at AND
         (kind = 'aborted' OR (OLD.state = 'in_flight' AND
                               (kind = 'commit_refused' OR kind = 'holder_dead' OR kind = 'fenced_on_exit'))))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)'); END;

-- Each intent a sweep deletes (the fence's or an operator's) leaves its
-- name and rowid behind.
CREATE TRIGGER intents_swept_remembered AFTER DELETE ON intents
BEGIN INSERT OR IGNORE INTO swept_intents (intent, intent_id) VALUES (OLD.intent, OLD.rowid); END;

-- A clear's event names the intent's row too.
DROP TRIGGER clears_apply;
CREATE TRIGGER clears_apply AFTER INSERT ON clears
BEGIN
  SELECT RAISE(ABORT, 'effectfence: cannot clear: requested_at is the time the ledger records the clear; leave it out')
   WHERE NEW.requested_at IS NOT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
  SELECT RAISE(ABORT, 'effectfence: cannot clear: previous_state is filled in by the ledger; leave it out')
   WHERE NEW.previous_state IS NOT NULL;
  UPDATE clears SET previous_state = (SELECT state FROM intents WHERE intent = NEW.intent)
   WHERE id = NEW.id;
  INSERT INTO events(at, kind, intent, intent_id, domain, seq, generation, actor, detail)
  SELECT NEW.requested_at, 'cleared', i.intent, i.rowid, i.domain, i.seq, i.generation, NEW.operator,
         json_object('reason', NEW.reason, 'previous_state', i.state, 'previous_reason', i.reason)
    FROM intents i WHERE i.intent = NEW.intent;
  UPDATE intents
     SET state = 'cleared', reason = NEW.reason, updated_at = NEW.requested_at, version = version + 1
   WHERE intent = NEW.intent;
END;

-- Newest first by commit order (the index by time is for export --since).
DROP VIEW recent_effects;
CREATE VIEW recent_effects AS
SELECT strftime('%Y-%m-%d %H:%M:%f', committed_at / 1000.0, 'unixepoch') AS committed,
       intent, tool, domain, seq, agent,
       json_extract(body, '$.args') AS args,
       json_extract(body, '$.result') AS result,
       hash AS certificate, parent
  FROM certificates
 ORDER BY id DESC;

PRAGMA legacy_alter_table = OFF;
