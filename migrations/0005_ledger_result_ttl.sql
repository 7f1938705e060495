-- effectfence ledger, schema version 5: how long results replay is the
-- ledger's, not each process's.
--
-- Every process swept finished intents with its own
-- EFFECTFENCE_RESULT_TTL_SECS, so the shortest TTL of any process that ever
-- opened the ledger won: a one-off `serve` from a shell with the default
-- day deleted results a week-long server had promised to replay, and late
-- duplicates of them ran again. Now a process records its TTL here before
-- it sweeps, only ever raising it, and sweeps with what the ledger holds.
CREATE TABLE retention (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL CHECK (value >= 0)
) STRICT;

-- A ledger written before this keeps at least as long as it already has:
-- its oldest finished intent shows how long its servers were keeping them.
-- A new ledger starts at 0, so the first sweeper's TTL is what it keeps.
INSERT INTO retention(name, value)
SELECT 'result_ttl_ms',
       max(0, coalesce(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - min(updated_at), 0))
  FROM intents WHERE state = 'done' OR state = 'cleared';
