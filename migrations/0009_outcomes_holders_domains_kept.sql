-- effectfence ledger, schema version 9: the hand edits that schema 8 still
-- let through and that could let an effect run again, or fork a domain's
-- chain, are refused too: a done intent deleted before the result TTL is
-- over or moved out of done, an in-flight attempt's holder, token or lease
-- changed without a new admission, a domain's sequence or head set back,
-- and a domain deleted without the event that keeps its numbers.
--
-- A done intent replays its result to late duplicates for the result TTL.
-- Deleted sooner, its next prepare would be fresh. A sweep (effectfence's
-- own, every ten minutes, or an operator's) first records a swept event
-- whose cutoff, older_than_ms, lies at least the ledger's result TTL before
-- the sweep's time; a done intent may be deleted only if it was finished
-- before the cutoff of the latest such event. Cleared intents are not
-- guarded: their next prepare is fresh anyway.
CREATE INDEX events_sweeps ON events(at) WHERE kind = 'swept';
CREATE TRIGGER intents_results_kept BEFORE DELETE ON intents
WHEN OLD.state = 'done' AND NOT EXISTS (
  SELECT 1 FROM (SELECT at, json_extract(detail, '$.older_than_ms') AS cutoff
                   FROM events WHERE kind = 'swept' ORDER BY at DESC LIMIT 1) AS sweep
   WHERE sweep.cutoff > OLD.updated_at
     AND sweep.cutoff + (SELECT value FROM retention WHERE name = 'result_ttl_ms') <= sweep.at)
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent replays its result to late duplicates until the result TTL is over; deleted sooner, its next prepare would be fresh and its effect could run again. Sweep finished intents as docs/OPERATIONS.md shows: a swept event first, whose older_than_ms is at least the result TTL before its time'); END;

-- An in-flight intent's holder, ticket token and lease change only with a
-- new admission, which raises its generation: set by hand to an expired
-- lease, or to a holder on another host, the attempt would be taken over
-- while its tool may still be running. A heartbeat only ever lengthens the
-- lease.
CREATE TRIGGER intents_holder_kept BEFORE UPDATE OF
  generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at ON intents
WHEN NEW.generation < OLD.generation OR (NEW.generation = OLD.generation AND (
     NEW.token IS NOT OLD.token OR NEW.holder_host IS NOT OLD.holder_host OR
     NEW.holder_boot IS NOT OLD.holder_boot OR NEW.holder_pid IS NOT OLD.holder_pid OR
     NEW.holder_started IS NOT OLD.holder_started OR NEW.lease_expires_at < OLD.lease_expires_at))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt''s holder, token and lease change only when it is admitted again: taken over early, its tool could run twice. Wait for the lease to run out; if its holder is gone, the next prepare fences it for an operator'); END;

-- A done intent stays done until a sweep deletes it: its effect ran, and
-- moved to failed or unknown it could be cleared, then run again.
CREATE TRIGGER intents_done_kept BEFORE UPDATE OF state ON intents
WHEN OLD.state = 'done' AND NEW.state IS NOT 'done'
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent stays done: its effect ran, and its result replays to late duplicates until a sweep deletes it'); END;

-- A domain's sequence and head only move forward, under the same name: set
-- back, the next admission would reuse a sequence number its certificates
-- hold, and the chain would fork. It is deleted only as effectfence evicts
-- an idle domain, after the domain_evicted event that keeps its numbers
-- from being handed out again.
CREATE TRIGGER domains_sequence_kept BEFORE UPDATE ON domains
WHEN NEW.domain IS NOT OLD.domain OR NEW.seq < OLD.seq OR NEW.head_seq < OLD.head_seq OR
     (NEW.head IS NOT OLD.head AND NEW.head_seq = OLD.head_seq)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain''s sequence number and head only move forward, under the same name: set back, its next effect would reuse a sequence number and fork the chain'); END;
CREATE TRIGGER domains_evicted_with_event BEFORE DELETE ON domains
WHEN NOT EXISTS (SELECT 1 FROM events WHERE kind = 'domain_evicted' AND domain = OLD.domain AND seq = OLD.seq)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain is deleted only as effectfence evicts an idle one, after a domain_evicted event with its sequence number, which keeps its numbers from being handed out again'); END;
