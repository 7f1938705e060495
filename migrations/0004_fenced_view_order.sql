-- effectfence ledger, schema version 4: the fenced view has one order.
--
-- Intents fenced in the same millisecond came out of the view in whatever
-- order the query plan gave, so `SELECT * FROM fenced` and
-- `effectfence fenced` could list them differently. Ties are now ordered by
-- intent, as the CLI orders them.
DROP VIEW fenced;
CREATE VIEW fenced AS
SELECT intent, state, tool, args, domain, agent, reason,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch') AS since,
       generation
  FROM intents WHERE state IN ('failed', 'unknown')
 ORDER BY updated_at, intent;
