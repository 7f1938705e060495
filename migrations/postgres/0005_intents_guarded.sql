-- effectfence ledger on PostgreSQL, schema version 5: the hand edits of
-- intents that an operator would reach for to undo the fence are refused
-- (see migrations/0007_intents_guarded.sql): clearing by UPDATE instead of
-- an INSERT INTO clears, and deleting, truncating or renaming unfinished
-- intents, whose next prepare would be fresh.

-- effectfence_clears_apply sets updated_at to the clear's requested_at, and
-- the clear's row holds the state it replaces: a hand UPDATE matches both
-- only if the intent was set back by hand since its last clear.
CREATE FUNCTION effectfence_intents_cleared_through_clears() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM clears
                  WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state) THEN
    RAISE EXCEPTION 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN (NEW.state = 'cleared' AND OLD.state IS DISTINCT FROM 'cleared')
EXECUTE FUNCTION effectfence_intents_cleared_through_clears();

CREATE TRIGGER intents_unfinished_kept BEFORE DELETE ON intents
FOR EACH ROW WHEN (OLD.state NOT IN ('done', 'cleared'))
EXECUTE FUNCTION effectfence_refuse('effectfence: an in-flight, failed or unknown intent cannot be deleted: its next prepare would be fresh and its effect could run again; reconcile it, then INSERT INTO clears(intent, operator, reason)');
CREATE TRIGGER intents_not_truncated BEFORE TRUNCATE ON intents
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: intents cannot be truncated: in-flight, failed and unknown intents would be fresh again; finished ones are swept once they stop replaying');
CREATE TRIGGER intents_renamed_never BEFORE UPDATE OF intent ON intents
FOR EACH ROW WHEN (NEW.intent IS DISTINCT FROM OLD.intent)
EXECUTE FUNCTION effectfence_refuse('effectfence: an intent cannot be renamed: its next prepare would be fresh and its effect could run again');
