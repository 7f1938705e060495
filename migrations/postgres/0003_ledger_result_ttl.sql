-- effectfence ledger on PostgreSQL, schema version 3: how long results replay
-- is the ledger's, not each process's (see migrations/0005_ledger_result_ttl.sql).
-- A process records its TTL before it sweeps, only ever raising it, and
-- sweeps with what the ledger holds, so a shorter-lived process never
-- deletes results a longer-lived one promised to replay.
CREATE TABLE retention (
  name  text PRIMARY KEY,
  value bigint NOT NULL CHECK (value >= 0)
);

-- An existing ledger keeps at least as long as it already has (its oldest
-- finished intent); a new one starts at 0.
INSERT INTO retention(name, value)
SELECT 'result_ttl_ms', greatest(0, coalesce(effectfence_now_ms() - min(updated_at), 0))
  FROM intents WHERE state IN ('done', 'cleared');
