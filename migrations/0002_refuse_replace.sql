-- effectfence ledger, schema version 2: REPLACE cannot rewrite the audit trail.
--
-- REPLACE (INSERT OR REPLACE, REPLACE INTO, UPDATE OR REPLACE) deletes the
-- row in its way without firing DELETE triggers (SQLite fires them only when
-- a connection sets PRAGMA recursive_triggers, which the sqlite3 shell does
-- not), so version 1's UPDATE and DELETE triggers let anyone at the prompt
-- rewrite a certificate, an event or a clear in place. These refuse every
-- INSERT that would take the place of an existing row; an INSERT of a new row
-- is unaffected. (An upsert, INSERT ... ON CONFLICT DO UPDATE, is refused here
-- first; version 1's UPDATE triggers refuse it too.)

CREATE TRIGGER certificates_immutable_replace BEFORE INSERT ON certificates
WHEN EXISTS (SELECT 1 FROM certificates WHERE hash = NEW.hash)
  OR EXISTS (SELECT 1 FROM certificates WHERE domain = NEW.domain AND seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable: this hash or (domain, seq) is already recorded'); END;

-- effectfence inserts events without an id (NEW.id is then -1 here, never an
-- existing row): the check is one rowid lookup.
CREATE TRIGGER events_append_only_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: the event log is append-only: this event id is already recorded'); END;

CREATE TRIGGER clears_append_only_replace BEFORE INSERT ON clears
WHEN EXISTS (SELECT 1 FROM clears WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be replaced'); END;

-- clears_append_only_update watches the columns it names, not id, so
-- UPDATE OR REPLACE clears SET id = <another clear's id> deleted that clear.
CREATE TRIGGER clears_append_only_renumber BEFORE UPDATE ON clears
WHEN NEW.id IS NOT OLD.id
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be changed'); END;
