#include "ledger/history_reads.h"

namespace effectfence {
namespace {

std::optional<std::string> optional_text(const ReaderRows& q, int col) {
  if (q.is_null(col)) return std::nullopt;
  return q.text(col);
}

std::optional<int64_t> optional_int(const ReaderRows& q, int col) {
  if (q.is_null(col)) return std::nullopt;
  return q.integer(col);
}

// Schema 12 (signatures) and 13 (archives) on SQLite, 10 and 11 on
// PostgreSQL: a ledger read in place without being migrated may lack them.
bool has_table(LedgerReader& db, const std::string& table) {
  return db.integer(db.is_sqlite() ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1"
                                   : "SELECT count(*) FROM information_schema.tables WHERE table_name = ?1 "
                                     "AND table_schema = current_schema()",
                    {table}) > 0;
}

// Columns 0-9 of every certificate walk, then the signature's three (10-12)
// and the domain's seq (13), NULL where the walk does not read them.
constexpr const char* kCertificateColumns =
    "SELECT hash, committed_at, body, intent, domain, seq, generation, coalesce(parent, ''), agent, tool, ";

StoredCertificate certificate_from(const ReaderRows& q) {
  StoredCertificate r;
  r.hash = q.text(0);
  r.committed_at = q.integer(1);
  r.body = q.text(2);
  r.intent = q.text(3);
  r.domain = q.text(4);
  r.seq = q.integer(5);
  r.generation = q.integer(6);
  r.parent = q.text(7);
  r.agent = q.text(8);
  r.tool = q.text(9);
  if (!q.is_null(10)) r.signature = CertificateSignature{q.text(10), q.text(11), q.integer(12)};
  r.domain_seq = optional_int(q, 13);
  return r;
}

StoredEvent event_from(const ReaderRows& q) {
  StoredEvent r;
  r.id = q.integer(0);
  r.at = q.integer(1);
  r.kind = q.text(2);
  r.intent = optional_text(q, 3);
  r.domain = optional_text(q, 4);
  r.seq = optional_int(q, 5);
  r.generation = optional_int(q, 6);
  r.actor = q.text(7);
  r.detail = q.text(8);
  return r;
}

}  // namespace

Records<StoredCertificate> certificates_in_commit_order(LedgerReader& db, const CertificateWalk& walk) {
  const std::string signature =
      walk.signatures && has_table(db, "signatures")
          ? "(SELECT s.key_id FROM signatures s WHERE s.certificate = certificates.hash), "
            "(SELECT s.signature FROM signatures s WHERE s.certificate = certificates.hash), "
            "(SELECT s.unsigned_before FROM signatures s WHERE s.certificate = certificates.hash), "
          : "NULL, NULL, NULL, ";
  const std::string domain_seq =
      walk.domain_seq ? "(SELECT d.seq FROM domains d WHERE d.domain = certificates.domain) " : "NULL ";
  return {db.query(kCertificateColumns + signature + domain_seq +
                       "FROM certificates WHERE committed_at >= ?1 ORDER BY committed_at, " +
                       db.certificate_tiebreak(),
                   {walk.since_ms}),
          certificate_from};
}

// In SQLite ORDER BY (at, id) is exactly the order of the time index, so
// the walk never sorts: no temp B-tree, constant memory on any number of
// rows. PostgreSQL streams through a cursor, a batch at a time.
Records<StoredEvent> events_in_time_order(LedgerReader& db, int64_t since_ms) {
  return {db.query("SELECT id, at, kind, intent, domain, seq, generation, actor, detail "
                   "FROM events WHERE at >= ?1 ORDER BY at, id",
                   {since_ms}),
          event_from};
}

std::optional<HistoryCounts> count_without_time_index(LedgerReader& db, int64_t since_ms) {
  if (!db.is_sqlite()) return std::nullopt;
  HistoryCounts counts;
  counts.certificates = db.integer("SELECT count(*) FROM certificates NOT INDEXED WHERE committed_at >= ?1", {since_ms});
  counts.events = db.integer("SELECT count(*) FROM events NOT INDEXED WHERE at >= ?1", {since_ms});
  return counts;
}

int64_t count_events(LedgerReader& db) { return db.integer("SELECT count(*) FROM events"); }

std::optional<std::string> certificate_body(LedgerReader& db, const std::string& hash) {
  auto rows = db.query("SELECT body FROM certificates WHERE hash = ?1", {hash});
  if (!rows->next()) return std::nullopt;
  return rows->text(0);
}

std::optional<std::string> certificate_intent(LedgerReader& db, const std::string& hash) {
  auto rows = db.query("SELECT intent FROM certificates WHERE hash = ?1", {hash});
  if (!rows->next()) return std::nullopt;
  return rows->text(0);
}

bool holds_certificate(LedgerReader& db, const std::string& hash) {
  return db.integer("SELECT count(*) FROM certificates WHERE hash = ?1", {hash}) > 0;
}

bool holds_event(LedgerReader& db, int64_t id) {
  return db.integer("SELECT count(*) FROM events WHERE id = ?1", {id}) > 0;
}

bool holds_clear(LedgerReader& db, int64_t id) {
  return db.integer("SELECT count(*) FROM clears WHERE id = ?1", {id}) > 0;
}

bool holds_signatures(LedgerReader& db) {
  return has_table(db, "signatures") &&
         db.integer("SELECT count(*) FROM (SELECT 1 FROM signatures LIMIT 1) AS one") > 0;
}

bool is_signed(LedgerReader& db, const std::string& hash) {
  return has_table(db, "signatures") &&
         db.integer("SELECT count(*) FROM signatures WHERE certificate = ?1", {hash}) > 0;
}

std::vector<OrphanSignature> orphan_signatures(LedgerReader& db) {
  std::vector<OrphanSignature> out;
  if (!has_table(db, "signatures")) return out;
  auto rows = db.query(
      "SELECT s.certificate, s.key_id FROM signatures s WHERE NOT EXISTS "
      "(SELECT 1 FROM certificates c WHERE c.hash = s.certificate) ORDER BY s.certificate");
  while (rows->next()) out.push_back({rows->text(0), rows->text(1)});
  return out;
}

std::vector<archive::RecordedSegment> read_archive_records(LedgerReader& db) {
  std::vector<archive::RecordedSegment> records;
  if (!has_table(db, "archives")) return records;
  auto rows = db.query(
      "SELECT segment, ledger_id, file, root, previous, before_ms, certificates, signatures, events, clears, key_id "
      "FROM archives ORDER BY segment");
  while (rows->next()) {
    archive::RecordedSegment r;
    r.segment = rows->integer(0);
    r.ledger_id = rows->text(1);
    r.file = rows->text(2);
    r.root = rows->text(3);
    r.previous = optional_text(*rows, 4);
    r.before_ms = rows->integer(5);
    r.counts = {rows->integer(6), rows->integer(7), rows->integer(8), rows->integer(9)};
    r.key_id = optional_text(*rows, 10);
    records.push_back(std::move(r));
  }
  return records;
}

bool archive_window_open(LedgerReader& db) {
  return has_table(db, "archive_in_progress") && db.integer("SELECT count(*) FROM archive_in_progress") > 0;
}

}  // namespace effectfence
