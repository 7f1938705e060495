-- effectfence ledger on PostgreSQL, schema version 9: the intents' state
-- moves only as the fence's state machine moves it, and an unknown intent
-- becomes failed only with its holder's abort event (see
-- migrations/0011_state_moves.sql).
DROP TRIGGER intents_fenced_kept ON intents;
CREATE FUNCTION effectfence_intents_follow_state_machine() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT ((OLD.state = 'cleared' AND NEW.state = 'in_flight') OR
          (OLD.state = 'in_flight' AND NEW.state = 'done') OR
          (OLD.state = 'unknown' AND NEW.state = 'done') OR
          (OLD.state = 'cleared' AND NEW.state = 'done') OR
          (OLD.state = 'in_flight' AND NEW.state = 'failed') OR
          (OLD.state = 'unknown' AND NEW.state = 'failed') OR
          (OLD.state = 'in_flight' AND NEW.state = 'unknown') OR
          (OLD.state = 'failed' AND NEW.state = 'cleared') OR
          (OLD.state = 'unknown' AND NEW.state = 'cleared')) THEN
    RAISE EXCEPTION 'effectfence: a failed or unknown intent stays fenced until it is cleared: reconcile it, then INSERT INTO clears(intent, operator, reason); a cleared one moves only as a prepare admits it again or its holder commits (the fence''s state machine has no move from % to %; docs/DESIGN.md lists them)', OLD.state, NEW.state;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER intents_follow_state_machine BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state AND NEW.state <> 'cleared' AND OLD.state <> 'done')
EXECUTE FUNCTION effectfence_intents_follow_state_machine();

DROP TRIGGER intents_in_flight_fenced_with_event ON intents;
CREATE OR REPLACE FUNCTION effectfence_intents_in_flight_fenced_with_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM events
                  WHERE intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at
                    AND (kind = 'aborted' OR (OLD.state = 'in_flight' AND
                                              kind IN ('commit_refused', 'holder_dead', 'fenced_on_exit')))) THEN
    RAISE EXCEPTION 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN ((OLD.state = 'in_flight' AND NEW.state IN ('failed', 'unknown')) OR
                   (OLD.state = 'unknown' AND NEW.state = 'failed'))
EXECUTE FUNCTION effectfence_intents_in_flight_fenced_with_event();
