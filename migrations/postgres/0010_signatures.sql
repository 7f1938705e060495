-- effectfence ledger on PostgreSQL, schema version 10: certificates signed
-- with a key the ledger does not hold (see migrations/0012_signatures.sql).
CREATE TABLE signatures (
  certificate text PRIMARY KEY REFERENCES certificates(hash),
  key_id      text NOT NULL CHECK (length(key_id) = 16),
  signature   text NOT NULL CHECK (length(signature) = 128),
  unsigned_before bigint NOT NULL CHECK (unsigned_before >= 0),
  signed_at   bigint NOT NULL
);

CREATE TRIGGER signatures_immutable BEFORE UPDATE OR DELETE ON signatures
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: signatures are immutable');
CREATE TRIGGER signatures_immutable_truncate BEFORE TRUNCATE ON signatures
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: signatures are immutable');
