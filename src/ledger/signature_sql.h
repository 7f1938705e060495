// What the SQLite and PostgreSQL ledgers ask the same way about signatures.
#pragma once

namespace effectfence {

// LedgerTxn::unsigned_before_signing, in one statement so that it reads one
// snapshot: what the signatures say, or, before the first, how many
// certificates no signature names, less the one about to be signed. (Read in
// two statements, a PostgreSQL transaction could miss a first signature
// committed in between and then count its certificate as unsigned, and so
// sign another count.) The count scans the certificates, but only until a
// first signature is there.
inline constexpr const char* kUnsignedBeforeSigning =
    "SELECT coalesce((SELECT unsigned_before FROM signatures LIMIT 1), "
    "(SELECT count(*) FROM certificates c WHERE NOT EXISTS "
    "(SELECT 1 FROM signatures s WHERE s.certificate = c.hash)) - 1)";

}  // namespace effectfence
