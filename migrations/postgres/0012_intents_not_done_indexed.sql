-- effectfence ledger on PostgreSQL, schema version 12: done intents are
-- not indexed by state (see migrations/0015_intents_not_done_indexed.sql). A
-- commit no longer moves its intent's entry among every finished intent of
-- its domain; the index holds every intent but the done ones, which is all
-- its readers ask for. PostgreSQL's planner sees that
-- state = 'in_flight' or state IN ('failed', 'unknown') implies the index's
-- condition, so no query changes.
DROP INDEX intents_by_state;
CREATE INDEX intents_not_done ON intents(state, domain)
 WHERE state = 'failed' OR state = 'unknown' OR state = 'in_flight' OR state = 'cleared';
