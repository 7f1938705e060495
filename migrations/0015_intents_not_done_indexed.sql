-- effectfence ledger, schema version 15: done intents are not indexed by state.
--
-- intents_by_state held every intent by (state, domain). Each commit moved
-- its intent's entry from 'in_flight' to 'done', among all the done intents
-- of its domain: one more page of that index dirtied per decision, a page
-- no other decision in the group commit shares once domains or names are
-- spread, and an index that grew with every intent ever finished. The
-- decisions read intents by state only in flight (takeovers, the live
-- count per domain, a host's attempts on exit) and fenced (failed,
-- unknown); the sweep, which reads done ones, scans the table (faster than
-- the index was, which it followed with a lookup per row).
-- intents_not_done holds every intent but the done ones (cleared ones are
-- few, and stats counts them through it), so it stays a few pages that
-- every decision of a group commit shares; stats counts done intents as
-- all intents but those. Measured with
-- effectfence_layout_bench (docs/BENCHMARK_HISTORY.md, "Schema 15"):
-- 2.49 / 2.93 log pages per decision (ordered / scattered names) before,
-- 1.93 / 2.37 after.
--
-- SQLite uses a partial index for a query whose WHERE implies the index's:
-- state = 'in_flight', state = 'unknown' and (state = 'failed' OR state =
-- 'unknown') each do, as written below; state IN (...) does not, so the
-- fenced view says the same with OR.
--
-- First what schema 15 adds: a ledger whose version was set back by hand
-- meets "already exists" and is refused as it is.
CREATE INDEX intents_not_done ON intents(state, domain)
 WHERE state = 'failed' OR state = 'unknown' OR state = 'in_flight' OR state = 'cleared';
DROP INDEX intents_by_state;

DROP VIEW fenced;
CREATE VIEW fenced AS
SELECT intent, state, tool, args, domain, agent, reason,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch') AS since,
       generation
  FROM intents WHERE state = 'failed' OR state = 'unknown'
 ORDER BY updated_at, intent;
