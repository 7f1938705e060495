-- effectfence ledger, schema version 13: archive segments.
--
-- Certificates, events and clears are never deleted by the fence, so the
-- ledger grows without end. `effectfence archive` moves old history out
-- into segment files (JSON lines, each closed by a SHA-256 root hash over
-- its lines and chained to the segment before it; docs/OPERATIONS.md,
-- "Archiving old history"), and records each segment here, in the same
-- transaction that deletes its rows. The file is written and synced first:
-- a row is never gone without its copy on disk.
--
-- A table of its own rather than an event kind: events.kind is a CHECK,
-- and SQLite changes a CHECK only by copying the whole table, which on the
-- ledgers that need archiving is gigabytes at upgrade.
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

-- The append-only tables refuse every deletion but an archive's.
DROP TRIGGER certificates_immutable_delete;
CREATE TRIGGER certificates_immutable_delete BEFORE DELETE ON certificates
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.committed_at < a.before_ms)
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
  OR EXISTS (SELECT 1 FROM domains WHERE head = OLD.hash)
  OR EXISTS (SELECT 1 FROM intents WHERE (state = 'in_flight' OR state = 'unknown') AND parent = OLD.hash)
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable; only effectfence archive moves old ones out, into a segment it has written first'); END;
DROP TRIGGER events_append_only_delete;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.at < a.before_ms)
  OR OLD.intent IS NULL
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only; only effectfence archive moves old events out, into a segment it has written first'); END;
DROP TRIGGER clears_append_only_delete;
CREATE TRIGGER clears_append_only_delete BEFORE DELETE ON clears
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.requested_at < a.before_ms)
  OR EXISTS (SELECT 1 FROM intents WHERE intent = OLD.intent)
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be deleted; only effectfence archive moves old ones out, into a segment it has written first'); END;
DROP TRIGGER signatures_immutable_delete;
CREATE TRIGGER signatures_immutable_delete BEFORE DELETE ON signatures
WHEN NOT EXISTS (SELECT 1 FROM archive_in_progress)
  OR EXISTS (SELECT 1 FROM certificates WHERE hash = OLD.certificate)
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable; only effectfence archive moves one out, with its certificate'); END;

-- An archive gathers an intent's clears with its other rows.
CREATE INDEX clears_by_intent ON clears(intent);
