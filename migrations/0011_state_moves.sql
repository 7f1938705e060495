-- effectfence ledger, schema version 11: the intents' state moves only as
-- the fence's state machine moves it (include/effectfence/state_machine.h,
-- kTransitions; a test compares this list with that table). Before, a hand
-- UPDATE could set a cleared intent to failed or unknown, and an unknown one
-- to failed with no event saying why. intents_fenced_kept, whose cases this
-- trigger covers, goes (after it: a migration starts with what it creates,
-- so a ledger whose version was set back meets "already exists"). ORs, not
-- IN: an IN list would build a temporary table on every state change. Moves
-- to cleared and from done have triggers of their own, with their own advice.
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
DROP TRIGGER intents_fenced_kept;

-- An unknown intent becomes failed only with its holder's abort event, as
-- an attempt in flight is fenced only with the event that says why.
DROP TRIGGER intents_in_flight_fenced_with_event;
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
WHEN ((OLD.state = 'in_flight' AND (NEW.state = 'failed' OR NEW.state = 'unknown')) OR
      (OLD.state = 'unknown' AND NEW.state = 'failed')) AND NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at AND
         (kind = 'aborted' OR (OLD.state = 'in_flight' AND
                               (kind = 'commit_refused' OR kind = 'holder_dead' OR kind = 'fenced_on_exit'))))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)'); END;
