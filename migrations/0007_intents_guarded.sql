-- effectfence ledger, schema version 7: the hand edits of intents that an
-- operator would reach for to undo the fence are refused.
--
-- `UPDATE intents SET state = 'cleared'` cleared an intent with no row in
-- clears and no cleared event, and deleting or renaming an in-flight,
-- failed or unknown intent made its next prepare fresh: either way its
-- effect could run again with nothing in the audit trail to say who allowed
-- it. A clear is an INSERT INTO clears, whose trigger sets the state; a row
-- is deleted only once finished (done or cleared), as the sweep does; an
-- intent keeps its name.

-- clears_apply sets updated_at to the clear's requested_at, and the clear's
-- row already holds the state it replaces: a hand UPDATE matches both only
-- if the intent was set back by hand since its last clear.
CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'cleared' AND OLD.state IS NOT 'cleared' AND NOT EXISTS (
  SELECT 1 FROM clears
   WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state)
BEGIN SELECT RAISE(ABORT, 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited'); END;

CREATE TRIGGER intents_unfinished_kept BEFORE DELETE ON intents
WHEN OLD.state IS NOT 'done' AND OLD.state IS NOT 'cleared'
BEGIN SELECT RAISE(ABORT, 'effectfence: an in-flight, failed or unknown intent cannot be deleted: its next prepare would be fresh and its effect could run again; reconcile it, then INSERT INTO clears(intent, operator, reason)'); END;

CREATE TRIGGER intents_renamed_never BEFORE UPDATE OF intent ON intents
WHEN NEW.intent IS NOT OLD.intent
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent cannot be renamed: its next prepare would be fresh and its effect could run again'); END;
