-- effectfence ledger on PostgreSQL, schema version 2: the fenced view has one
-- order. Intents fenced in the same millisecond are ordered by intent, as
-- `effectfence fenced` orders them, instead of as the query plan gave.
CREATE OR REPLACE VIEW fenced AS
SELECT intent, state, tool, args, domain, agent, reason, effectfence_utc(updated_at) AS since, generation
  FROM intents WHERE state IN ('failed', 'unknown')
 ORDER BY updated_at, intent;
