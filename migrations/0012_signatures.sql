-- effectfence ledger, schema version 12: certificates signed with a key the
-- ledger does not hold. A hash chain proves the certificates agree with one
-- another, not who wrote them: whoever can write this file can rewrite a
-- result and rehash. A process given a signing key (serve/wrap
-- --signing-key) writes one row here per certificate it issues, in the same
-- transaction: an Ed25519 signature over
--   "effectfence certificate signature v1\n" || key_id || "\n" || certificate
--     || "\n" || unsigned_before
-- unsigned_before: how many unsigned certificates the ledger held when its
-- first signature was written, the same in every row. Certificates are
-- never deleted, so a ledger holding more unsigned ones than that has lost
-- signatures: a certificate rewritten and rehashed cannot be signed again.
-- (src/core/signing.h). `effectfence verify --public-key FILE` checks them.
-- A separate table: certificates stay as they were, and a process without
-- a key writes nothing more than before.
CREATE TABLE signatures (
  certificate TEXT PRIMARY KEY REFERENCES certificates(hash),
  key_id      TEXT NOT NULL CHECK (length(key_id) = 16),
  signature   TEXT NOT NULL CHECK (length(signature) = 128),
  unsigned_before INTEGER NOT NULL CHECK (unsigned_before >= 0),
  signed_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Append-only, as certificates are: a signature, once written, is what the
-- key said about that certificate.
CREATE TRIGGER signatures_immutable_update BEFORE UPDATE ON signatures
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable'); END;
CREATE TRIGGER signatures_immutable_delete BEFORE DELETE ON signatures
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable'); END;
-- REPLACE deletes the row in its way without firing DELETE triggers; and a
-- signature names a certificate that is recorded (foreign keys are off in
-- most connections, so REFERENCES alone would not say so).
CREATE TRIGGER signatures_immutable_replace BEFORE INSERT ON signatures
WHEN EXISTS (SELECT 1 FROM signatures WHERE certificate = NEW.certificate)
  OR NOT EXISTS (SELECT 1 FROM certificates WHERE hash = NEW.certificate)
BEGIN SELECT RAISE(ABORT, 'effectfence: signatures are immutable, one per recorded certificate: this certificate is already signed, or is not recorded'); END;
