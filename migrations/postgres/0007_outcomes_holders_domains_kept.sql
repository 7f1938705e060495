-- effectfence ledger on PostgreSQL, schema version 7: a done intent changed
-- at all or deleted before the result TTL is over, an in-flight attempt's
-- holder, token, lease or generation changed without a new admission, a
-- domain's sequence or head set back, and a domain deleted (or truncated)
-- without the event that keeps its numbers are refused too (see
-- migrations/0009_outcomes_holders_domains_kept.sql).

-- A done intent may be deleted only if it was finished before the cutoff
-- of the last swept event written (by id: sweeps take the retention row's
-- lock, so a sweep's own event governs its deletes), which lies at least
-- the ledger's result TTL before that sweep's time. A sweep records its
-- event first.
CREATE INDEX events_sweeps ON events(id) WHERE kind = 'swept';
CREATE FUNCTION effectfence_intents_results_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM (SELECT at, (detail::jsonb ->> 'older_than_ms')::bigint AS cutoff
                     FROM events WHERE kind = 'swept' ORDER BY id DESC LIMIT 1) AS sweep
     WHERE sweep.cutoff > OLD.updated_at
       AND sweep.cutoff + (SELECT value FROM retention WHERE name = 'result_ttl_ms') <= sweep.at) THEN
    RAISE EXCEPTION 'effectfence: a done intent replays its result to late duplicates until the result TTL is over; deleted sooner, its next prepare would be fresh and its effect could run again. Sweep finished intents as docs/OPERATIONS.md shows: a swept event first, whose older_than_ms is at least the result TTL before its time';
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER intents_results_kept BEFORE DELETE ON intents
FOR EACH ROW WHEN (OLD.state = 'done')
EXECUTE FUNCTION effectfence_intents_results_kept();

-- An attempt's holder, ticket token and lease change only with a new
-- admission, which raises its generation with a fresh token, in flight,
-- admitted as of that write; a heartbeat only ever lengthens the lease.
CREATE TRIGGER intents_holder_kept BEFORE UPDATE OF
  generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at ON intents
FOR EACH ROW WHEN (NEW.generation < OLD.generation OR (NEW.generation = OLD.generation AND (
     NEW.token IS DISTINCT FROM OLD.token OR NEW.holder_host IS DISTINCT FROM OLD.holder_host OR
     NEW.holder_boot IS DISTINCT FROM OLD.holder_boot OR NEW.holder_pid IS DISTINCT FROM OLD.holder_pid OR
     NEW.holder_started IS DISTINCT FROM OLD.holder_started OR NEW.lease_expires_at < OLD.lease_expires_at)) OR
     (NEW.generation > OLD.generation AND NOT (NEW.token IS DISTINCT FROM OLD.token AND NEW.state = 'in_flight' AND
                                              NEW.admitted_at = NEW.updated_at)))
EXECUTE FUNCTION effectfence_refuse('effectfence: an attempt''s holder, token, generation and lease change only when it is admitted again: taken over early, its tool could run twice. Wait for the lease to run out; if its holder is gone, the next prepare fences it for an operator');

-- A done intent is not changed until a sweep deletes it: moved out of done
-- it could be cleared and run again; dated back, swept too soon.
CREATE TRIGGER intents_done_kept BEFORE UPDATE ON intents
FOR EACH ROW WHEN (OLD.state = 'done')
EXECUTE FUNCTION effectfence_refuse('effectfence: a done intent cannot be changed: its effect ran, and its result replays to late duplicates until a sweep deletes it');

-- A domain's sequence and head only move forward, under the same name; it
-- is deleted only after the domain_evicted event that keeps its numbers.
CREATE TRIGGER domains_sequence_kept BEFORE UPDATE ON domains
FOR EACH ROW WHEN (NEW.domain IS DISTINCT FROM OLD.domain OR NEW.seq < OLD.seq OR NEW.head_seq < OLD.head_seq OR
                   (NEW.head IS DISTINCT FROM OLD.head AND NEW.head_seq = OLD.head_seq))
EXECUTE FUNCTION effectfence_refuse('effectfence: a domain''s sequence number and head only move forward, under the same name: set back, its next effect would reuse a sequence number and fork the chain');
CREATE FUNCTION effectfence_domains_evicted_with_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM events WHERE kind = 'domain_evicted' AND domain = OLD.domain AND seq = OLD.seq) THEN
    RAISE EXCEPTION 'effectfence: a domain is deleted only as effectfence evicts an idle one, after a domain_evicted event with its sequence number, which keeps its numbers from being handed out again';
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER domains_evicted_with_event BEFORE DELETE ON domains
FOR EACH ROW EXECUTE FUNCTION effectfence_domains_evicted_with_event();
CREATE TRIGGER domains_not_truncated BEFORE TRUNCATE ON domains
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: domains cannot be truncated: their next effects would reuse sequence numbers');
