-- effectfence ledger on PostgreSQL, schema version 13: counters in shards.
--
-- Every decision added to the same counters rows just before its COMMIT,
-- so each transaction waited for the row lock of the one before it until
-- that one's COMMIT had flushed: decisions about different intents were
-- decided one after another, and their commits never shared a WAL flush.
-- Each connection now adds to a shard of its own (its backend's pid modulo
-- 64; rows made as needed), and readers sum the shards. Measured with
-- effectfence_bench (docs/BENCHMARK_HISTORY.md, "The PostgreSQL ledger's
-- counters").
ALTER TABLE counters ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0 AND shard < 64);
ALTER TABLE counters DROP CONSTRAINT counters_pkey;
ALTER TABLE counters ADD PRIMARY KEY (name, shard);

CREATE OR REPLACE VIEW stats AS
SELECT
  (SELECT sum(value) FROM counters WHERE name = 'admitted')::bigint AS admitted,
  (SELECT sum(value) FROM counters WHERE name = 'replayed')::bigint AS replayed,
  (SELECT sum(value) FROM counters WHERE name LIKE 'refused_%') AS refused,
  (SELECT sum(value) FROM counters WHERE name = 'refused_stale_read_set')::bigint AS refused_stale_read_set,
  (SELECT sum(value) FROM counters WHERE name = 'refused_domain_race')::bigint AS refused_domain_race,
  (SELECT sum(value) FROM counters WHERE name = 'refused_in_flight')::bigint AS refused_in_flight,
  (SELECT sum(value) FROM counters WHERE name = 'refused_prior_failure')::bigint AS refused_prior_failure,
  (SELECT sum(value) FROM counters WHERE name = 'refused_payload_mismatch')::bigint AS refused_payload_mismatch,
  (SELECT sum(value) FROM counters WHERE name = 'replayed' OR name LIKE 'refused_%') AS prevented,
  (SELECT sum(value) FROM counters WHERE name = 'committed')::bigint AS committed,
  (SELECT sum(value) FROM counters WHERE name = 'aborted')::bigint AS aborted;
