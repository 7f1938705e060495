-- effectfence ledger on PostgreSQL, schema version 8: an attempt in flight
-- is fenced (failed or unknown) only with the event that says why, written
-- first in the same transaction (see
-- migrations/0010_in_flight_fenced_with_event.sql).
CREATE FUNCTION effectfence_intents_in_flight_fenced_with_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM events
                  WHERE intent = NEW.intent AND generation = OLD.generation AND at = NEW.updated_at
                    AND kind IN ('aborted', 'commit_refused', 'holder_dead', 'fenced_on_exit')) THEN
    RAISE EXCEPTION 'effectfence: an attempt in flight may be running its tool: it is fenced only by its holder (fence_abort), by a commit whose read-set moved, or once its holder is gone, each with the event that says so. Wait for it, or stop its holder process (the next prepare then fences it unknown), then clear it with INSERT INTO clears(intent, operator, reason)';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER intents_in_flight_fenced_with_event BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN (OLD.state = 'in_flight' AND NEW.state IN ('failed', 'unknown'))
EXECUTE FUNCTION effectfence_intents_in_flight_fenced_with_event();
