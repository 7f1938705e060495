-- effectfence ledger, schema version 9: the hand edits that schema 8 still
-- let through and that could let an effect run again, or fork a domain's
-- chain, are refused too: a done intent changed at all, or deleted before
-- the result TTL is over; an in-flight attempt's holder, token, lease or
-- generation changed without a new admission; a domain's sequence or head
-- set back, and a domain deleted or replaced without the event that keeps
-- its numbers.
--
-- A done intent replays its result to late duplicates for the result TTL.
-- Deleted sooner, its next prepare would be fresh. A sweep (effectfence's
-- own, every ten minutes, or an operator's) first records a swept event
-- whose cutoff, older_than_ms, lies at least the ledger's result TTL before
-- the sweep's time; a done intent may be deleted only if it was finished
-- before the cutoff of the last such event written (by id, so that a sweep's
-- own event always governs its deletes). Cleared intents are not guarded:
-- their next prepare is fresh anyway.
CREATE INDEX events_sweeps ON events(id) WHERE kind = 'swept';
CREATE TRIGGER intents_results_kept BEFORE DELETE ON intents
WHEN OLD.state = 'done' AND NOT EXISTS (
  SELECT 1 FROM (SELECT at, json_extract(detail, '$.older_than_ms') AS cutoff
                   FROM events WHERE kind = 'swept' ORDER BY id DESC LIMIT 1) AS sweep
   WHERE sweep.cutoff > OLD.updated_at
     AND sweep.cutoff + (SELECT value FROM retention WHERE name = 'result_ttl_ms') <= sweep.at)
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent replays its result to late duplicates until the result TTL is over; deleted sooner, its next prepare would be fresh and its effect could run again. Sweep finished intents as docs/OPERATIONS.md shows: a swept event first, whose older_than_ms is at least the result TTL before its time'); END;

-- An attempt's holder, ticket token and lease change only with a new
-- admission, which raises its generation with a fresh token, in flight,
-- admitted as of that write: set by hand to an expired lease, or to a holder
-- on another host, or given a new generation alone (its holder's ticket then
-- no longer commits), the attempt would be taken over while its tool may
-- still be running. A heartbeat only ever lengthens the lease.
CREATE TRIGGER intents_holder_kept BEFORE UPDATE OF
  generation, token, holder_host, holder_boot, holder_pid, holder_started, lease_expires_at ON intents
WHEN NEW.generation < OLD.generation OR (NEW.generation = OLD.generation AND (
     NEW.token IS NOT OLD.token OR NEW.holder_host IS NOT OLD.holder_host OR
     NEW.holder_boot IS NOT OLD.holder_boot OR NEW.holder_pid IS NOT OLD.holder_pid OR
     NEW.holder_started IS NOT OLD.holder_started OR NEW.lease_expires_at < OLD.lease_expires_at)) OR
     (NEW.generation > OLD.generation AND NOT (NEW.token IS NOT OLD.token AND NEW.state = 'in_flight' AND
                                              NEW.admitted_at = NEW.updated_at))
BEGIN SELECT RAISE(ABORT, 'effectfence: an attempt''s holder, token, generation and lease change only when it is admitted again: taken over early, its tool could run twice. Wait for the lease to run out; if its holder is gone, the next prepare fences it for an operator'); END;

-- A done intent is not changed until a sweep deletes it: its effect ran;
-- moved to failed or unknown it could be cleared and run again, and dated
-- back it could be swept while its result is still promised.
CREATE TRIGGER intents_done_kept BEFORE UPDATE ON intents
WHEN OLD.state = 'done'
BEGIN SELECT RAISE(ABORT, 'effectfence: a done intent cannot be changed: its effect ran, and its result replays to late duplicates until a sweep deletes it'); END;

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
-- Nor replaced: REPLACE deletes the row in its way, met by name or rowid,
-- without firing DELETE triggers (a domain put back at seq 0 would hand out
-- numbers its certificates hold). effectfence inserts a domain only when no
-- row has its name.
CREATE TRIGGER domains_replaced_never BEFORE INSERT ON domains
WHEN EXISTS (SELECT 1 FROM domains WHERE domain = NEW.domain)
  OR EXISTS (SELECT 1 FROM domains WHERE rowid = NEW.rowid)
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain cannot be replaced: this name or rowid is already recorded (a REPLACE would delete the row without the checks on deletes, and its next effect would reuse a sequence number)'); END;
CREATE TRIGGER domains_renumbered_never BEFORE UPDATE OF rowid ON domains
WHEN NEW.rowid IS NOT OLD.rowid
BEGIN SELECT RAISE(ABORT, 'effectfence: a domain''s rowid cannot be changed: an UPDATE OR REPLACE would delete the row it meets without the checks on deletes'); END;
