-- effectfence ledger, schema version 10: an attempt in flight is fenced
-- (failed or unknown) only with the event that says why, written first in
-- the same transaction: its holder's abort, a commit whose read-set moved,
-- its holder found gone, or its server stopping. By hand, an UPDATE to
-- failed or unknown made a fenced intent of an attempt whose tool may still
-- be running, which a clear then let run a second time. (ORs, not IN: an
-- IN list would build a temporary table on every state change.)
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
WHEN OLD.state = 'in_flight' AND (NEW.state = 'failed' OR NEW.state = 'unknown') AND NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at AND
         (kind = 'aborted' OR kind = 'commit_refused' OR kind = 'holder_dead' OR kind = 'fenced_on_exit'))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)'); END;
