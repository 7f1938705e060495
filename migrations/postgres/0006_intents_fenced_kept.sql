-- effectfence ledger on PostgreSQL, schema version 6: the hand edits of
-- intents that schema 5 let through, each of which could make a fenced
-- intent's next prepare fresh, are refused too (see
-- migrations/0008_intents_not_replaced.sql; PostgreSQL has no REPLACE, and
-- an upsert's conflict is an UPDATE to its triggers).

-- A failed intent leaves that state only through a clear; an unknown one
-- also when its holder's late commit or abort arrives (done, failed), as
-- effectfence records it. Set to in_flight or done by hand, a fenced
-- intent could be taken over or deleted, and its effect run again.
CREATE TRIGGER intents_fenced_kept BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN (OLD.state IN ('failed', 'unknown') AND NEW.state IS DISTINCT FROM OLD.state AND
                   NEW.state <> 'cleared' AND NOT (OLD.state = 'unknown' AND NEW.state IN ('failed', 'done')))
EXECUTE FUNCTION effectfence_refuse('effectfence: a failed or unknown intent stays fenced until it is cleared: reconcile it, then INSERT INTO clears(intent, operator, reason)');

-- An intent is done when its certificate is recorded, in the same
-- transaction (effectfence inserts the certificate first).
CREATE FUNCTION effectfence_intents_done_with_certificate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM certificates
                  WHERE hash = NEW.cert_hash AND intent = NEW.intent AND generation = NEW.generation) THEN
    RAISE EXCEPTION 'effectfence: an intent is done only with the certificate of its effect, which fence_commit records';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER intents_done_with_certificate BEFORE UPDATE OF state ON intents
FOR EACH ROW WHEN (NEW.state = 'done' AND OLD.state IS DISTINCT FROM 'done')
EXECUTE FUNCTION effectfence_intents_done_with_certificate();

-- A hand UPDATE to cleared passes only where the clear it names is of this
-- attempt (the same generation, which its cleared event records): a clear
-- of an earlier attempt, re-admitted and fenced since, does not stand for
-- this one.
CREATE OR REPLACE FUNCTION effectfence_intents_cleared_through_clears() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM clears
                  WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state)
     OR NOT EXISTS (SELECT 1 FROM events
                     WHERE intent = NEW.intent AND kind = 'cleared' AND at = NEW.updated_at
                       AND generation = OLD.generation) THEN
    RAISE EXCEPTION 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited';
  END IF;
  RETURN NEW;
END $$;
