-- effectfence ledger: the full current schema (version 15), for people.
--
-- This file is documentation you can run: `sqlite3 new.sqlite < schema/schema.sql`
-- builds exactly what effectfence builds by applying migrations/ in order
-- (a test checks the two agree). effectfence itself only ever applies
-- migrations/NNNN_*.sql, each in its own transaction.
--
-- Reading the ledger (see docs/OPERATIONS.md for a runbook):
--   intents       one row per logical action and its state:
--                 in_flight -> done | failed | unknown -> cleared
--   domains       contention scopes; seq is the version read-sets check
--   certificates  immutable SHA-256 records of effects that ran
--   signatures    Ed25519 signatures of certificates, by a key kept outside the ledger
--   events        append-only audit log (who, when, why)
--   clears        audited operator clears: INSERT a row to clear an intent
--   archives      segments of old history moved out by effectfence archive
--   counters      ledger-wide outcome counts
--   retention     how long finished intents replay before a sweep forgets them
--   swept_intents the names a sweep forgot, and the rowids their events carry
--   views         fenced, in_flight, recent_effects, domain_sequences,
--                 recent_events, stats
PRAGMA application_id = 1162235459;  -- 0x45464E43, "EFNC": this file is an effectfence ledger
PRAGMA user_version = 15;            -- schema version
PRAGMA journal_mode = WAL;           -- readers never block the writer; set by effectfence on open


-- One row per logical action. The row is the compare-and-swap target: every
-- change happens inside one BEGIN IMMEDIATE transaction and bumps version.
CREATE TABLE intents (
  intent           TEXT PRIMARY KEY,
  state            TEXT NOT NULL CHECK (state = 'in_flight' OR state = 'done' OR state = 'failed' OR
                                          state = 'unknown' OR state = 'cleared'),
  domain           TEXT NOT NULL,
  tool             TEXT NOT NULL,
  args             TEXT NOT NULL,
  payload_hash     TEXT NOT NULL,             -- SHA-256 of canonical {"args":..,"tool":..}
  agent            TEXT NOT NULL,
  seq              INTEGER NOT NULL,          -- domain sequence number reserved at admission
  generation       INTEGER NOT NULL,          -- +1 on every (re)admission
  token            TEXT NOT NULL,             -- fence token of the current holder
  read_set         TEXT NOT NULL DEFAULT '[]',
  parent           TEXT,                      -- certificate this effect builds on
  known_clock      TEXT NOT NULL DEFAULT '{}',
  holder_host      TEXT NOT NULL,
  holder_boot      TEXT NOT NULL,             -- kernel boot id: a reboot ends every holder
  holder_pid       INTEGER NOT NULL,
  holder_started   INTEGER NOT NULL,          -- process start time: tells a reused pid apart
  lease_expires_at INTEGER NOT NULL,
  admitted_at      INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  cert_hash        TEXT,                      -- set when done
  reason           TEXT,                      -- why failed / unknown / cleared
  version          INTEGER NOT NULL DEFAULT 1
) STRICT;
-- Every intent but the done ones, by state: each decision's entry then
-- lands among the few in flight, not among every finished one
-- (migrations/0015).
CREATE INDEX intents_not_done ON intents(state, domain)
 WHERE state = 'failed' OR state = 'unknown' OR state = 'in_flight' OR state = 'cleared';

-- Clearing is an INSERT INTO clears (below), whose trigger sets the state:
-- a hand UPDATE to 'cleared' would leave no audit. clears_apply sets
-- updated_at to the clear's requested_at, the clear's row holds the state
-- it replaces and its event the generation it cleared: a hand UPDATE
-- matches all three only if the intent was set back by hand since its last
-- clear (to where that clear had already put it).
CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'cleared' AND OLD.state IS NOT 'cleared' AND (NOT EXISTS (
  SELECT 1 FROM clears
   WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state) OR NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent_id = OLD.rowid AND intent = NEW.intent AND kind = 'cleared' AND at = NEW.updated_at AND
         generation = OLD.generation))
BEGIN SELECT RAISE(ABORT, 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited'); END;
-- Deleting an unfinished intent would make its next prepare fresh. Finished
-- ones (done, cleared) are deleted by the sweep once they stop replaying.
CREATE TRIGGER intents_unfinished_kept BEFORE DELETE ON intents
WHEN OLD.state IS NOT 'done' AND OLD.state IS NOT 'cleared'
BEGIN SELECT RAISE(ABORT, 'effectfence: an in-flight, failed or unknown intent cannot be deleted: its next prepare would be fresh and its effect could run again; reconcile it, then INSERT INTO clears(intent, operator, reason)'); END;
-- Nor renamed, which would free its name just the same.
CREATE TRIGGER intents_renamed_never BEFORE UPDATE OF intent ON intents
WHEN NEW.intent IS NOT OLD.intent
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent cannot be renamed: its next prepare would be fresh and its effect could run again'); END;
-- Nor replaced: REPLACE (INSERT OR REPLACE, REPLACE INTO, an upsert, an
-- UPDATE OR REPLACE of rowid) deletes the row in its way, met by name or by
-- rowid, without firing DELETE triggers. effectfence inserts an intent only
-- when no row has its name, and changes one with UPDATE.
CREATE TRIGGER intents_replaced_never BEFORE INSERT ON intents
WHEN EXISTS (SELECT 1 FROM intents WHERE intent = NEW.intent)
  OR EXISTS (SELECT 1 FROM intents WHERE rowid = NEW.rowid)
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent cannot be replaced: this name or rowid is already recorded, and an INSERT may only add a new intent (a REPLACE would delete the row without the checks on deletes, and its next prepare would be fresh); change it with UPDATE, clear it with INSERT INTO clears(intent, operator, reason). (An effectfence server older than this ledger''s schema 8 writes this way: stop it and restart it at the new version)'); END;
CREATE TRIGGER intents_renumbered_never BEFORE UPDATE OF rowid ON intents
WHEN NEW.rowid IS NOT OLD.rowid
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent''s rowid cannot be changed: an UPDATE OR REPLACE would delete the row it meets without the checks on deletes'); END;
-- The state moves only as the fence's state machine moves it
-- (include/effectfence/state_machine.h; a test compares the two).
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
-- In flight to failed or unknown only with the event that says why
-- (written first): an abort, a stale commit, a holder gone, a server stopping;
-- unknown to failed only with its holder's abort.
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
WHEN ((OLD.state = 'in_flight' AND (NEW.state = 'failed' OR NEW.state = 'unknown')) OR
      (OLD.state = 'unknown' AND NEW.state = 'failed')) AND NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent_id = OLD.rowid AND intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at AND
         (kind = 'aborted' OR (OLD.state = 'in_flight' AND
                               (kind = 'commit_refused' OR kind = 'holder_dead' OR kind = 'fenced_on_exit'))))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)'); END;
-- Done only with the certificate of its effect (inserted first, in the same
-- transaction).
CREATE TRIGGER intents_done_with_certificate BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'done' AND OLD.state IS NOT 'done' AND NOT EXISTS (
  SELECT 1 FROM certificates WHERE hash = NEW.cert_hash AND intent = NEW.intent AND generation = NEW.generation)
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent is done only with the certificate of its effect, which fence_commit records'); END;

-- A done intent is not changed until a sweep deletes it: its effect ran;
-- moved to failed or unknown it could be cleared and run again, and dated
-- back it could be swept while its result is still promised.
CREATE TRIGGER intents_done_kept BEFORE UPDATE ON intents
WHEN OLD.state = 'done'
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent cannot be changed: its effect ran, and its result replays to late duplicates until a sweep deletes it'); END;

-- A done intent replays its result to late duplicates for the result TTL;
-- deleted sooner, its next prepare would be fresh. A sweep records a swept
-- event first, whose cutoff (older_than_ms) lies at least the ledger's TTL
-- before its time; a done intent is deleted only under the cutoff of the
-- last one written. (Cleared intents are fresh anyway.)
CREATE TRIGGER intents_results_kept BEFORE DELETE ON intents
WHEN OLD.state = 'done' AND NOT EXISTS (
  SELECT 1 FROM (SELECT at, json_extract(detail, '$.older_than_ms') AS cutoff
                   FROM events WHERE kind = 'swept' ORDER BY id DESC LIMIT 1) AS sweep
   WHERE sweep.cutoff > OLD.updated_at
     AND sweep.cutoff + (SELECT value FROM retention WHERE name = 'result_ttl_ms') <= sweep.at)
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent replays its result to late duplicates until the result TTL is over; deleted sooner, its next prepare would be fresh and its effect could run again. Sweep finished intents as docs/OPERATIONS.md shows: a swept event first, whose older_than_ms is at least the result TTL before its time'); END;

-- An attempt's holder, ticket token and lease change only with a new
-- admission, which raises its generation with a fresh token, in flight,
-- admitted as of that write: set by hand to an expired lease, or to a holder
-- on another host, or given a new generation alone (its holder's ticket then
-- no longer commits), the attempt would be taken over while its tool may
-- still be running. A heartbeat only ever lengthens the lease.
CREATE TRIGGER intents_holder_kept BEFORE UPDATE OF
  generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at ON intents
WHEN NEW.generation < OLD.generation OR (NEW.generation = OLD.generation AND (
     NEW.token IS NOT OLD.token OR NEW.holder_host IS NOT OLD.holder_host OR
     NEW.holder_boot IS NOT OLD.holder_boot OR NEW.holder_pid IS NOT OLD.holder_pid OR
     NEW.holder_started IS NOT OLD.holder_started OR NEW.lease_expires_at < OLD.lease_expires_at)) OR
     (NEW.generation > OLD.generation AND NOT (NEW.token IS NOT OLD.token AND NEW.state = 'in_flight' AND
                                              NEW.admitted_at = NEW.updated_at))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt''s holder, token, generation and lease change only when it is admitted again: taken over early, its tool could run twice. Wait for the lease to run out; if its holder is gone, the next prepare fences it for an operator'); END;

-- A swept intent's name and its row's rowid, kept by the sweep (off the
-- decisions' path) so that a late commit of a swept attempt still finds
-- the admission that issued its ticket, by name, without an index by name
-- on the events. Each intent a sweep deletes (the fence's or an
-- operator's) leaves one.
CREATE TABLE swept_intents (
  intent    TEXT NOT NULL,
  intent_id INTEGER NOT NULL,
  PRIMARY KEY (intent, intent_id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER intents_swept_remembered AFTER DELETE ON intents
BEGIN INSERT OR IGNORE INTO swept_intents (intent, intent_id) VALUES (OLD.intent, OLD.rowid); END;

-- Contention scopes. seq is the version column read-sets are checked
-- against; it only ever goes up, so a sequence number is never reused.
CREATE TABLE domains (
  domain     TEXT PRIMARY KEY,
  seq        INTEGER NOT NULL DEFAULT 0,
  clock      TEXT NOT NULL DEFAULT '{}',      -- merge of the clocks of committed effects
  head       TEXT,                            -- latest committed certificate
  head_seq   INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL
) STRICT;
-- A domain's sequence and head only move forward, under the same name: set
-- back, the next admission would reuse a sequence number its certificates
-- hold, and the chain would fork. It is deleted only as effectfence evicts
-- an idle domain, after the domain_evicted event that keeps its numbers
-- from being handed out again.
CREATE TRIGGER domains_sequence_kept BEFORE UPDATE ON domains
WHEN NEW.domain IS NOT OLD.domain OR NEW.seq < OLD.seq OR NEW.head_seq < OLD.head_seq OR
     (NEW.head IS NOT OLD.head AND NEW.head_seq = OLD.head_seq)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain''s sequence number and head only move forward, under the same name: set back, its next effect would reuse a sequence number and fork the chain'); END;
CREATE TRIGGER domains_evicted_with_event BEFORE DELETE ON domains
WHEN NOT EXISTS (SELECT 1 FROM events WHERE kind = 'domain_evicted' AND domain = OLD.domain AND seq = OLD.seq)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain is deleted only as effectfence evicts an idle one, after a domain_evicted event with its sequence number, which keeps its numbers from being handed out again'); END;
-- Nor replaced: REPLACE deletes the row in its way, met by name or rowid,
-- without firing DELETE triggers (a domain put back at seq 0 would hand out
-- numbers its certificates hold). effectfence inserts a domain only when no
-- row has its name.
CREATE TRIGGER domains_replaced_never BEFORE INSERT ON domains
WHEN EXISTS (SELECT 1 FROM domains WHERE domain = NEW.domain)
  OR EXISTS (SELECT 1 FROM domains WHERE rowid = NEW.rowid)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain cannot be replaced: this name or rowid is already recorded (a REPLACE would delete the row without the checks on deletes, and its next effect would reuse a sequence number)'); END;
CREATE TRIGGER domains_renumbered_never BEFORE UPDATE OF rowid ON domains
WHEN NEW.rowid IS NOT OLD.rowid
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain''s rowid cannot be changed: an UPDATE OR REPLACE would delete the row it meets without the checks on deletes'); END;

-- Immutable records of effects that ran. hash = SHA-256(body); body is the
-- canonical JSON of {intent, parent, domain, seq, generation, tool, args,
-- result, vector_clock, read_set, agent}, so anyone can recompute it. The
-- columns after committed_at are read from the body, never stored twice.
-- Found by hash; an intent's through its committed events (no index by
-- intent or by (domain, seq): each would cost every decision a random page).
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

-- Signatures of certificates, one row per certificate issued by a process
-- given a signing key (serve/wrap --signing-key), written in the same
-- transaction: Ed25519 over
--   "effectfence certificate signature v1\n" || key_id || "\n" || certificate
--     || "\n" || unsigned_before
-- unsigned_before: how many unsigned certificates the ledger held when its
-- first signature was written, the same in every row. Certificates are
-- never deleted, so a ledger holding more unsigned ones than that has lost
-- signatures: a certificate rewritten and rehashed cannot be signed again.
-- key_id is the first 16 hex digits of SHA-256 over the raw public key.
-- The key itself is never here. `effectfence verify --public-key FILE`
-- checks every row, and fails an unsigned certificate committed after the
-- ledger's first signed one (docs/GUARANTEES.md, "Signed certificates").
CREATE TABLE signatures (
  certificate TEXT PRIMARY KEY REFERENCES certificates(hash),
  key_id      TEXT NOT NULL CHECK (length(key_id) = 16),
  signature   TEXT NOT NULL CHECK (length(signature) = 128),
  unsigned_before INTEGER NOT NULL CHECK (unsigned_before >= 0),
  signed_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Append-only, as certificates are: a signature, once written, is what the
-- key said about that certificate.
CREATE TRIGGER signatures_immutable_update BEFORE UPDATE ON signatures
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable'); END;
CREATE TRIGGER signatures_immutable_delete BEFORE DELETE ON signatures
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress)
  OR EXISTS (SELECT 1 FROM certificates WHERE hash = OLD.certificate)
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable; only effectfence archive moves one out, with its certificate'); END;
-- REPLACE deletes the row in its way without firing DELETE triggers; and a
-- signature names a certificate that is recorded (foreign keys are off in
-- most connections, so REFERENCES alone would not say so).
CREATE TRIGGER signatures_immutable_replace BEFORE INSERT ON signatures
WHEN EXISTS (SELECT 1 FROM signatures WHERE certificate = NEW.certificate)
  OR NOT EXISTS (SELECT 1 FROM certificates WHERE hash = NEW.certificate)
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable, one per recorded certificate: this certificate is already signed, or is not recorded'); END;

-- Append-only audit log: admissions, takeovers, outcomes, fencing, clears.
-- An event names its intent, and the intent's rowid when it was written
-- (minus the id of its name's first event if it had no row), which the
-- index grows by at one end whatever the names: look an intent's events up
-- by both, since SQLite may give a swept intent's rowid to a new one.
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
CREATE INDEX events_by_intent ON events(intent_id);
CREATE INDEX events_by_time ON events(at);
-- Only evictions are looked up by domain (to never reuse their numbers).
CREATE INDEX events_evicted_domains ON events(domain) WHERE kind = 'domain_evicted';
-- The last sweep is looked up when a done intent is deleted.
CREATE INDEX events_sweeps ON events(id) WHERE kind = 'swept';

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

-- Ledger-wide counters (each process also keeps its own).
CREATE TABLE counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO counters(name) VALUES
  ('admitted'), ('replayed'), ('refused_stale_read_set'), ('refused_domain_race'),
  ('refused_in_flight'), ('refused_prior_failure'), ('refused_payload_mismatch'),
  ('committed'), ('aborted');

-- How long a finished intent replays its result before a sweep forgets it:
-- the longest EFFECTFENCE_RESULT_TTL_SECS of any process that swept this
-- ledger (each records its own first, only ever raising the value), so a
-- shorter-lived process never deletes results a longer-lived one promised.
-- To keep results for less, lower the TTL of every server, then this row.
CREATE TABLE retention (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL CHECK (value >= 0)
) STRICT;
INSERT INTO retention(name, value) VALUES ('result_ttl_ms', 0);

-- Operator clears. Clearing is one INSERT, by the CLI or by hand:
--   INSERT INTO clears(intent, operator, reason)
--     VALUES ('charge:order-123', 'alice', 'provider shows no charge');
-- The triggers refuse nonsense, move the intent to 'cleared' (the next
-- prepare is fresh) and write the audit event, all in the same transaction.
CREATE TABLE clears (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  intent         TEXT NOT NULL,
  operator       TEXT NOT NULL CHECK (length(operator) > 0),
  reason         TEXT NOT NULL CHECK (length(reason) > 0),
  requested_at   INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
  previous_state TEXT
) STRICT;

-- An archive gathers an intent's clears with its other rows.
CREATE INDEX clears_by_intent ON clears(intent);

CREATE TRIGGER clears_check BEFORE INSERT ON clears
BEGIN
  SELECT RAISE(ABORT, 'effectfence: cannot clear: no such intent')
   WHERE NOT EXISTS (SELECT 1 FROM intents WHERE intent = NEW.intent);
  SELECT RAISE(ABORT, 'effectfence: cannot clear: only failed or unknown intents can be cleared (done results and in-flight attempts cannot)')
   WHERE (SELECT state FROM intents WHERE intent = NEW.intent) NOT IN ('failed', 'unknown');
END;

-- 'now' is the same for a whole statement, so the column's default always
-- equals it here; any other value was given by hand.
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

-- previous_state is filled in once, by clears_apply.
CREATE TRIGGER clears_append_only_update BEFORE UPDATE ON clears
WHEN OLD.previous_state IS NOT NULL OR NEW.intent IS NOT OLD.intent OR NEW.operator IS NOT OLD.operator OR
     NEW.reason IS NOT OLD.reason OR NEW.requested_at IS NOT OLD.requested_at
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be changed'); END;
CREATE TRIGGER clears_append_only_delete BEFORE DELETE ON clears
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.requested_at < a.before_ms)
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be deleted; only effectfence archive moves old ones out, into a segment it has written first'); END;
-- Against REPLACE, as for certificates: neither REPLACE INTO clears nor
-- UPDATE OR REPLACE clears SET id = <another clear's id> may delete a clear.
CREATE TRIGGER clears_append_only_replace BEFORE INSERT ON clears
WHEN EXISTS (SELECT 1 FROM clears WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be replaced'); END;
CREATE TRIGGER clears_append_only_renumber BEFORE UPDATE ON clears
WHEN NEW.id IS NOT OLD.id
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be changed'); END;

-- Segments of old history moved out by `effectfence archive` (each file
-- written and synced before its rows are deleted, in the transaction that
-- records it here; docs/OPERATIONS.md, "Archiving old history").
CREATE TABLE archives (
  segment      INTEGER PRIMARY KEY CHECK (segment >= 1),  -- 1, 2, ...: the file segment-NNNNNN.jsonl
  ledger_id    TEXT NOT NULL CHECK (length(ledger_id) = 32),  -- chosen at the first archive, the same in every row
  file         TEXT NOT NULL,
  root         TEXT NOT NULL CHECK (length(root) = 64),   -- SHA-256 over the segment's lines before its last
  previous     TEXT,                                      -- the root of segment - 1 (NULL for the first)
  before_ms    INTEGER NOT NULL,                          -- the cutoff: every row in it is older
  first_at     INTEGER,                                   -- the oldest and newest time among its rows
  last_at      INTEGER,
  certificates INTEGER NOT NULL CHECK (certificates >= 0),
  signatures   INTEGER NOT NULL CHECK (signatures >= 0),
  events       INTEGER NOT NULL CHECK (events >= 0),
  clears       INTEGER NOT NULL CHECK (clears >= 0),
  key_id       TEXT,                                      -- the key that signed its root, if one did
  archived_at  INTEGER NOT NULL
) STRICT;

-- Numbered in order, chained, of one ledger, and only by the archive that
-- opened the deletion window for this very root.
CREATE TRIGGER archives_chained BEFORE INSERT ON archives
WHEN NEW.segment IS NOT coalesce((SELECT max(segment) FROM archives), 0) + 1
  OR NEW.previous IS NOT (SELECT root FROM archives WHERE segment = NEW.segment - 1)
  OR NEW.ledger_id IS NOT coalesce((SELECT ledger_id FROM archives WHERE segment = 1), NEW.ledger_id)
  OR NOT EXISTS (SELECT 1 FROM archive_in_progress WHERE root = NEW.root)
BEGIN SELECT RAISE(ABORT, 'effectfence: an archive segment is recorded only by effectfence archive, next in order, chained to the one before'); END;
CREATE TRIGGER archives_immutable_update BEFORE UPDATE ON archives
BEGIN SELECT RAISE(ABORT, 'effectfence: archive records are immutable'); END;
CREATE TRIGGER archives_immutable_delete BEFORE DELETE ON archives
BEGIN SELECT RAISE(ABORT, 'effectfence: archive records are immutable'); END;

-- The deletion window: one row, inserted and deleted inside the archive's
-- own transaction, so no other transaction ever sees it. While it is there
-- the delete triggers below let rows older than its cutoff go, and only
-- those no live intent, domain head or fenced attempt needs.
CREATE TABLE archive_in_progress (
  one       INTEGER PRIMARY KEY CHECK (one = 1),
  root      TEXT NOT NULL CHECK (length(root) = 64),
  before_ms INTEGER NOT NULL
) STRICT;
-- Closed only once the segment it deleted into is recorded.
CREATE TRIGGER archive_in_progress_recorded BEFORE DELETE ON archive_in_progress
WHEN NOT EXISTS (SELECT 1 FROM archives WHERE root = OLD.root)
BEGIN SELECT RAISE(ABORT, 'effectfence: an archive''s deletion window closes only with the record of its segment'); END;
CREATE TRIGGER archive_in_progress_fixed BEFORE UPDATE ON archive_in_progress
BEGIN SELECT RAISE(ABORT, 'effectfence: an archive''s deletion window cannot be changed'); END;

-- Views for people at the sqlite3 prompt.
CREATE VIEW fenced AS
SELECT intent, state, tool, args, domain, agent, reason,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch') AS since,
       generation
  FROM intents WHERE state = 'failed' OR state = 'unknown'
 ORDER BY updated_at, intent;

CREATE VIEW in_flight AS
SELECT intent, tool, domain, agent, generation,
       holder_host || ':' || holder_pid AS holder,
       strftime('%Y-%m-%d %H:%M:%f', admitted_at / 1000.0, 'unixepoch') AS admitted,
       strftime('%Y-%m-%d %H:%M:%f', lease_expires_at / 1000.0, 'unixepoch') AS lease_expires
  FROM intents WHERE state = 'in_flight'
 ORDER BY admitted_at;

CREATE VIEW recent_effects AS
SELECT strftime('%Y-%m-%d %H:%M:%f', committed_at / 1000.0, 'unixepoch') AS committed,
       intent, tool, domain, seq, agent,
       json_extract(body, '$.args') AS args,
       json_extract(body, '$.result') AS result,
       hash AS certificate, parent
  FROM certificates
 ORDER BY id DESC;

CREATE VIEW domain_sequences AS
SELECT domain, seq, head AS latest_certificate,
       (SELECT count(*) FROM intents i WHERE i.domain = d.domain AND i.state = 'in_flight') AS in_flight,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch') AS updated
  FROM domains d ORDER BY domain;

CREATE VIEW recent_events AS
SELECT id, strftime('%Y-%m-%d %H:%M:%f', at / 1000.0, 'unixepoch') AS at_utc,
       kind, intent, domain, seq, generation, actor, detail
  FROM events ORDER BY id DESC;

CREATE VIEW stats AS
SELECT
  (SELECT value FROM counters WHERE name = 'admitted') AS admitted,
  (SELECT value FROM counters WHERE name = 'replayed') AS replayed,
  (SELECT sum(value) FROM counters WHERE name LIKE 'refused_%') AS refused,
  (SELECT value FROM counters WHERE name = 'refused_stale_read_set') AS refused_stale_read_set,
  (SELECT value FROM counters WHERE name = 'refused_domain_race') AS refused_domain_race,
  (SELECT value FROM counters WHERE name = 'refused_in_flight') AS refused_in_flight,
  (SELECT value FROM counters WHERE name = 'refused_prior_failure') AS refused_prior_failure,
  (SELECT value FROM counters WHERE name = 'refused_payload_mismatch') AS refused_payload_mismatch,
  (SELECT sum(value) FROM counters WHERE name = 'replayed' OR name LIKE 'refused_%') AS prevented,
  (SELECT value FROM counters WHERE name = 'committed') AS committed,
  (SELECT value FROM counters WHERE name = 'aborted') AS aborted;
