// Typed reads of a ledger's history: its certificates (with their
// signatures), its event log and the record of what was archived, for
// export, verify and the archive check. The SQL lives here, beside the
// tables it reads, so no command writes its own. Each read goes through a
// LedgerReader (one snapshot, either engine); walks stream row by row, so
// memory stays flat on any number of rows.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/signing.h"
#include "ledger/archive.h"
#include "ledger/ledger_reader.h"

namespace effectfence {

// Rows of one walk, converted to Record one at a time.
template <class Record>
class Records {
 public:
  using Convert = Record (*)(const ReaderRows&);
  Records(std::unique_ptr<ReaderRows> rows, Convert convert) : rows_(std::move(rows)), convert_(convert) {}
  // The next record, or nullopt when the walk is over.
  std::optional<Record> next() {
    if (!rows_->next()) return std::nullopt;
    return convert_(*rows_);
  }

 private:
  std::unique_ptr<ReaderRows> rows_;
  Convert convert_;
};

// A certificate row: the hashed body and the plain columns people query
// (which verify holds to the body).
struct StoredCertificate {
  std::string hash, body, intent, domain, parent, agent, tool;  // parent "" for none
  int64_t committed_at = 0, seq = 0, generation = 0;
  std::optional<CertificateSignature> signature;  // with CertificateWalk::signatures
  std::optional<int64_t> domain_seq;  // with CertificateWalk::domain_seq: its domain's seq, if the row exists
};

// What a walk over the certificates reads besides the row itself. A
// signature and a domain's seq are looked up by primary key row by row, so
// the walk stays on the time index.
struct CertificateWalk {
  int64_t since_ms = INT64_MIN;  // committed_at at or after
  bool signatures = false;
  bool domain_seq = false;
};

// Certificates in commit order (committed_at, then the engine's tiebreak),
// the same order every time.
Records<StoredCertificate> certificates_in_commit_order(LedgerReader& db, const CertificateWalk& walk);

// An event of the append-only log.
struct StoredEvent {
  int64_t id = 0, at = 0;
  std::string kind, actor, detail;
  std::optional<std::string> intent, domain;
  std::optional<int64_t> seq, generation;
};

// Events at or after since_ms in order of time (at, then id).
Records<StoredEvent> events_in_time_order(LedgerReader& db, int64_t since_ms);

// The certificates and events at or after since_ms counted from the tables
// themselves, not through their time index (SQLite; nullopt for PostgreSQL,
// whose index is not a page of the same file): a damaged index gives fewer
// rows than its table holds.
struct HistoryCounts {
  int64_t certificates = 0;
  int64_t events = 0;
};
std::optional<HistoryCounts> count_without_time_index(LedgerReader& db, int64_t since_ms);

int64_t count_events(LedgerReader& db);

// Lookups by primary key.
std::optional<std::string> certificate_body(LedgerReader& db, const std::string& hash);
std::optional<std::string> certificate_intent(LedgerReader& db, const std::string& hash);
bool holds_certificate(LedgerReader& db, const std::string& hash);
bool holds_event(LedgerReader& db, int64_t id);
bool holds_clear(LedgerReader& db, int64_t id);

// Signatures. A ledger read in place without being migrated may have no
// signatures table: it then holds none.
bool holds_signatures(LedgerReader& db);
bool is_signed(LedgerReader& db, const std::string& hash);
// Signatures whose certificate is not in the ledger, by certificate.
struct OrphanSignature {
  std::string certificate, key_id;
};
std::vector<OrphanSignature> orphan_signatures(LedgerReader& db);

// The ledger's record of the segments effectfence archive moved old history
// into, oldest first (none on a ledger from before archives).
std::vector<archive::RecordedSegment> read_archive_records(LedgerReader& db);
// Whether archive_in_progress holds a row: the deletion window an archive
// opens only inside its own transaction, left open.
bool archive_window_open(LedgerReader& db);

}  // namespace effectfence
