-- effectfence ledger, schema version 3: CHECK constraints SQLite compares in place.
--
-- SQLite evaluates `x IN ('a', 'b', 'c', ...)` (a list of more than two
-- constants) by first building a temporary B-tree of the list, and it does
-- so on every execution of the statement: every intent upsert and every
-- event insert paid for one (about a tenth of the ledger writer's CPU per
-- decision; docs/BENCHMARKS.md). The same checks written as
-- `x = 'a' OR x = 'b' ...` are compared in place.
--
-- SQLite cannot change a CHECK in place, so both tables are rebuilt: each is
-- renamed aside, recreated under its own name, copied row for row (event
-- ids and their AUTOINCREMENT high-water mark kept), and the old copy
-- dropped with its indexes and triggers, which are then recreated. With
-- legacy_alter_table the renames leave the views and the clears triggers as
-- written, so they name the new tables.
PRAGMA legacy_alter_table = ON;

ALTER TABLE intents RENAME TO intents_v2;
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
INSERT INTO intents SELECT * FROM intents_v2;
DROP TABLE intents_v2;
CREATE INDEX intents_by_state ON intents(state, domain);

ALTER TABLE events RENAME TO events_v2;
CREATE TABLE events (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  at         INTEGER NOT NULL,
  kind       TEXT NOT NULL CHECK (kind = 'admitted' OR kind = 'takeover' OR kind = 'committed' OR
                                  kind = 'aborted' OR kind = 'commit_refused' OR kind = 'holder_dead' OR
                                  kind = 'fenced_on_exit' OR kind = 'cleared' OR kind = 'swept' OR
                                  kind = 'domain_evicted'),
  intent     TEXT,
  domain     TEXT,
  seq        INTEGER,
  generation INTEGER,
  actor      TEXT NOT NULL,                   -- agent, operator, or process (host:pid)
  detail     TEXT NOT NULL DEFAULT '{}'       -- JSON: reason, certificate, result of a refused commit
) STRICT;
INSERT INTO events SELECT * FROM events_v2;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'events_v2')
 WHERE name = 'events' AND seq < (SELECT seq FROM sqlite_sequence WHERE name = 'events_v2');
DROP TABLE events_v2;
CREATE INDEX events_by_intent ON events(intent);
CREATE INDEX events_by_time ON events(at);
-- Only evictions are looked up by domain (to never reuse their numbers).
CREATE INDEX events_evicted_domains ON events(domain) WHERE kind = 'domain_evicted';

CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only'); END;
-- Against REPLACE, as for certificates. effectfence inserts events without an
-- id (NEW.id is then -1 here, never an existing row): one rowid lookup.
CREATE TRIGGER events_append_only_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only: this event id is already recorded'); END;

PRAGMA legacy_alter_table = OFF;
