-- effectfence ledger, schema version 6: a clear's audit record is whole.
--
-- The append-only trigger on clears named every column but previous_state,
-- which the ledger fills in itself, so that column could be changed by hand
-- afterwards. And requested_at, the time a clear is recorded and dated in
-- the event log, could be given in the INSERT, so a clear could be dated
-- years before or after it happened and slip past `export --since` and the
-- runbook's queries by time. Now previous_state is filled in once, by the
-- ledger, and the ledger dates every clear itself (a clear becomes visible
-- when its transaction commits: keep the transaction short).
DROP TRIGGER clears_append_only_update;
CREATE TRIGGER clears_append_only_update BEFORE UPDATE ON clears
WHEN OLD.previous_state IS NOT NULL OR NEW.intent IS NOT OLD.intent OR NEW.operator IS NOT OLD.operator OR
     NEW.reason IS NOT OLD.reason OR NEW.requested_at IS NOT OLD.requested_at
BEGIN SELECT RAISE(ABORT, 'effectfence: clears are an audit record and cannot be changed'); END;

-- 'now' is the same for a whole statement, so the column's default always
-- equals it here; any other value was given by hand.
DROP TRIGGER clears_apply;
CREATE TRIGGER clears_apply AFTER INSERT ON clears
BEGIN
  SELECT RAISE(ABORT, 'effectfence: cannot clear: requested_at is the time the ledger records the clear; leave it out')
   WHERE NEW.requested_at IS NOT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
  SELECT RAISE(ABORT, 'effectfence: cannot clear: previous_state is filled in by the ledger; leave it out')
   WHERE NEW.previous_state IS NOT NULL;
  UPDATE clears SET previous_state = (SELECT state FROM intents WHERE intent = NEW.intent)
   WHERE id = NEW.id;
  INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
  SELECT NEW.requested_at, 'cleared', i.intent, i.domain, i.seq, i.generation, NEW.operator,
         json_object('reason', NEW.reason, 'previous_state', i.state, 'previous_reason', i.reason)
    FROM intents i WHERE i.intent = NEW.intent;
  UPDATE intents
     SET state = 'cleared', reason = NEW.reason, updated_at = NEW.requested_at, version = version + 1
   WHERE intent = NEW.intent;
END;
