-- effectfence ledger on PostgreSQL, schema version 4: the ledger dates every
-- clear itself (see migrations/0006_clears_whole.sql). requested_at, the
-- time a clear is recorded and dated in the event log, could be given in
-- the INSERT, so a clear could be dated before or after it happened and slip
-- past `export --since` and queries by time. It is now the start of the
-- INSERT statement (statement_timestamp(), the same for its default and its
-- trigger), not of its transaction, which may have been open for hours.
CREATE FUNCTION effectfence_statement_ms() RETURNS bigint LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM statement_timestamp()) * 1000)::bigint $$;

ALTER TABLE clears ALTER COLUMN requested_at SET DEFAULT effectfence_statement_ms();

CREATE OR REPLACE FUNCTION effectfence_clears_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE current_state text;
BEGIN
  SELECT state INTO current_state FROM intents WHERE intent = NEW.intent FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'effectfence: cannot clear: no such intent';
  END IF;
  IF current_state NOT IN ('failed', 'unknown') THEN
    RAISE EXCEPTION 'effectfence: cannot clear: only failed or unknown intents can be cleared (done results and in-flight attempts cannot)';
  END IF;
  IF NEW.requested_at IS DISTINCT FROM effectfence_statement_ms() THEN
    RAISE EXCEPTION 'effectfence: cannot clear: requested_at is the time the ledger records the clear; leave it out';
  END IF;
  IF NEW.previous_state IS NOT NULL THEN
    RAISE EXCEPTION 'effectfence: cannot clear: previous_state is filled in by the ledger; leave it out';
  END IF;
  NEW.previous_state := current_state;
  RETURN NEW;
END $$;
