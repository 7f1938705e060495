#include "ledger/verify_reads.h"

#include "effectfence/json.h"
#include "effectfence/state_machine.h"

namespace effectfence {
namespace {

// An event kind as an SQL literal, spelled by the state machine's table.
std::string kind(EventKind k) { return std::string("'") + event_kind_name(k) + "'"; }
std::string state(IntentState s) { return std::string("'") + state_name(s) + "'"; }

// An admission that handed out a seq: a new attempt or a takeover.
std::string is_admission(const std::string& alias) {
  return "(" + alias + ".kind = " + kind(EventKind::admitted) + " OR " + alias + ".kind = " +
         kind(EventKind::takeover) + ")";
}

// A committed event e naming certificate c exactly as the rules write it
// (src/fence/rules.cc): matched inside the database, with index lookups.
std::string names_certificate(const std::string& hash = "c.hash") {
  return "e.detail IN ('{\"certificate\":\"' || " + hash + " || '\"}', "
         "'{\"certificate\":\"' || " + hash + " || '\",\"resolved_unknown\":true}', "
         "'{\"after_clear\":true,\"certificate\":\"' || " + hash + " || '\"}')";
}

std::optional<Json> detail_object(const std::string& text) {
  JsonError ignored;
  auto detail = parse_strict(text, &ignored, WideIntegers::as_doubles);
  if (!detail || !detail->is_object()) return std::nullopt;
  return detail;
}

}  // namespace

std::vector<std::string> integrity_problems(LedgerReader& db) {
  std::vector<std::string> out;
  if (!db.is_sqlite()) return out;
  auto lines = db.query("PRAGMA integrity_check(100)");
  while (lines->next()) {
    if (lines->text(0) != "ok") out.push_back(lines->text(0));
  }
  return out;
}

// SQLite from schema 14 indexes neither events nor certificates by intent
// name (a ledger verify reads in place may be older): the queries that
// pair them go through the certificate's hash, read out of the event's
// detail, which the certificates are indexed by, and events by intent_id.
bool without_name_indexes(LedgerReader& db) {
  return db.is_sqlite() && db.integer("SELECT count(*) FROM pragma_table_info('events') WHERE name = 'intent_id'") > 0;
}

std::string certificate_named(const std::string& alias) {
  return "CASE WHEN json_valid(" + alias + ".detail) THEN json_extract(" + alias + ".detail, '$.certificate') END";
}

void certificates_not_named_once(LedgerReader& db, const RowSink<CertificateOfIntent>& sink) {
  const std::string sql =
      without_name_indexes(db)
          ? "SELECT c.hash, c.intent FROM certificates c LEFT JOIN (SELECT e.named AS hash, e.intent, count(*) AS "
            "naming FROM (SELECT " + certificate_named("e") + " AS named, intent, detail FROM events e WHERE kind = " +
                kind(EventKind::committed) + ") AS e WHERE " + names_certificate("e.named") +
                " GROUP BY e.named, e.intent) AS k ON k.hash = c.hash AND k.intent = c.intent "
                "WHERE coalesce(k.naming, 0) <> 1 ORDER BY c.hash"
          : "SELECT hash, intent FROM (SELECT c.hash, c.intent, (SELECT count(*) FROM events e "
            "WHERE e.intent = c.intent AND e.kind = " +
                kind(EventKind::committed) + " AND " + names_certificate() +
                ") AS naming FROM certificates c) AS counted WHERE naming <> 1 ORDER BY hash";
  auto rows = db.query(sql);
  while (rows->next()) sink({rows->text(0), rows->text(1)});
}

std::vector<std::string> committed_event_details(LedgerReader& db, const std::string& intent) {
  auto rows = db.query("SELECT detail FROM events WHERE intent = ?1 AND kind = " + kind(EventKind::committed), {intent});
  std::vector<std::string> out;
  while (rows->next()) out.push_back(rows->text(0));
  return out;
}

void committed_events_naming_none(LedgerReader& db, const RowSink<CommittedEvent>& sink) {
  const std::string certificate = without_name_indexes(db) ? "c.hash = " + certificate_named("e") + " AND " : "";
  auto rows = db.query("SELECT id, coalesce(intent, ''), detail FROM events e WHERE kind = " +
                       kind(EventKind::committed) + " AND NOT EXISTS (SELECT 1 FROM certificates c WHERE " +
                       certificate + "c.intent = e.intent AND " + names_certificate() + ") ORDER BY id");
  while (rows->next()) sink({rows->integer(0), rows->text(1), rows->text(2)});
}

void certificates_not_admitted(LedgerReader& db, const RowSink<CertificatePlace>& sink) {
  // Without an index by intent name: certificates and admissions sorted
  // together by what was handed out (memory stays flat: the sorter spills),
  // and the places only certificates hold. Names and rows alone, not the
  // intent_id an event carries: a hand-written event may have none.
  const std::string where = " ON k.intent IS c.intent AND k.generation IS c.generation AND k.domain IS c.domain AND "
                            "k.seq IS c.seq ORDER BY c.hash";
  auto rows = db.query(
      without_name_indexes(db)
          ? "SELECT c.hash, c.intent, c.generation, c.domain, c.seq FROM certificates c JOIN (SELECT intent, "
            "generation, domain, seq FROM (SELECT intent, generation, domain, seq, 1 AS certificate FROM certificates "
            "UNION ALL SELECT intent, generation, domain, seq, 0 FROM events a WHERE " + is_admission("a") +
                ") GROUP BY intent, generation, domain, seq HAVING min(certificate) = 1) AS k" + where
          : "SELECT c.hash, c.intent, c.generation, c.domain, c.seq FROM certificates c WHERE NOT EXISTS "
            "(SELECT 1 FROM events a WHERE a.intent = c.intent AND a.generation = c.generation AND "
            "a.domain = c.domain AND a.seq = c.seq AND " + is_admission("a") + ") ORDER BY c.hash");
  while (rows->next()) {
    CertificatePlace p;
    p.hash = rows->text(0);
    p.intent = rows->text(1);
    p.generation = rows->integer(2);
    p.domain = rows->text(3);
    p.seq = rows->integer(4);
    sink(p);
  }
}

void certificate_seqs_held_twice(LedgerReader& db, const RowSink<SeqCount>& sink) {
  auto rows = db.query(
      "SELECT domain, seq, count(*) FROM certificates GROUP BY domain, seq HAVING count(*) > 1 ORDER BY domain, seq");
  while (rows->next()) sink({rows->text(0), rows->integer(1), rows->integer(2)});
}

void admission_seqs_handed_out_twice(LedgerReader& db, const RowSink<SeqCount>& sink) {
  auto rows = db.query("SELECT domain, seq, count(*) FROM events e WHERE " + is_admission("e") +
                       " GROUP BY domain, seq HAVING count(*) > 1 ORDER BY domain, seq");
  while (rows->next()) sink({rows->text(0), rows->integer(1), rows->integer(2)});
}

std::vector<std::string> certificates_at(LedgerReader& db, const std::string& domain, int64_t seq) {
  auto rows = db.query("SELECT hash FROM certificates WHERE domain = ?1 AND seq = ?2 ORDER BY hash", {domain, seq});
  std::vector<std::string> out;
  while (rows->next()) out.push_back(rows->text(0));
  return out;
}

void done_intents_naming_foreign(LedgerReader& db, const RowSink<DoneIntent>& sink) {
  // Read in table order and the few rows found sorted after (the || keeps
  // SQLite from ordering through the intents' name index): a damaged index
  // would hand out names the table does not hold, which integrity_check
  // reports as what it is.
  auto rows = db.query(
      "SELECT i.intent, coalesce(i.cert_hash, ''), c.hash, c.intent FROM intents i "
      "LEFT JOIN certificates c ON c.hash = i.cert_hash "
      "WHERE i.state = " +
      state(IntentState::done) + " AND (c.hash IS NULL OR c.intent <> i.intent) ORDER BY i.intent || ''");
  while (rows->next()) {
    DoneIntent d;
    d.intent = rows->text(0);
    d.certificate = rows->text(1);
    if (!rows->is_null(2)) d.certificate_intent = rows->text(3);
    sink(d);
  }
}

void attempts_moved_out_of_done(LedgerReader& db, const RowSink<UndoneAttempt>& sink) {
  auto rows = db.query(
      "SELECT c.hash, c.intent, c.generation, i.state, c.committed_at FROM certificates c "
      "JOIN intents i ON i.intent = c.intent AND i.generation = c.generation "
      "WHERE i.state <> " +
      state(IntentState::done) + " ORDER BY c.intent");
  while (rows->next()) {
    UndoneAttempt u;
    u.hash = rows->text(0);
    u.intent = rows->text(1);
    u.generation = rows->integer(2);
    u.state = rows->text(3);
    u.committed_at = rows->integer(4);
    sink(u);
  }
}

void attempts_cleared_after_commit(LedgerReader& db, const RowSink<ClearedAttempt>& sink) {
  auto rows = db.query(
      "SELECT c.hash, c.intent, c.generation, e.actor, c.committed_at, e.id FROM events e "
      "JOIN certificates c ON c.intent = e.intent AND c.generation = e.generation "
      "WHERE e.kind = " +
      kind(EventKind::cleared) + " AND NOT EXISTS (SELECT 1 FROM events k WHERE k.kind = " +
      kind(EventKind::committed) + (without_name_indexes(db) ? " AND k.intent_id = e.intent_id" : "") +
      " AND k.intent = e.intent AND k.generation = e.generation AND k.id > e.id) ORDER BY e.id");
  while (rows->next()) {
    ClearedAttempt a;
    a.hash = rows->text(0);
    a.intent = rows->text(1);
    a.generation = rows->integer(2);
    a.actor = rows->text(3);
    a.committed_at = rows->integer(4);
    a.clear_event = rows->integer(5);
    sink(a);
  }
}

std::optional<int64_t> last_admission_before(LedgerReader& db, const std::string& intent, int64_t generation,
                                             int64_t before) {
  auto rows = db.query("SELECT a.id FROM events a WHERE a.intent = ?1 AND a.generation = ?2 AND a.id < ?3 AND " +
                           is_admission("a") + " ORDER BY a.id DESC LIMIT 1",
                       {intent, generation, before});
  if (!rows->next()) return std::nullopt;
  return rows->integer(0);
}

std::vector<SweepEvent> sweep_events(LedgerReader& db) {
  auto rows = db.query("SELECT id, detail FROM events WHERE kind = " + kind(EventKind::swept) + " ORDER BY id");
  std::vector<SweepEvent> out;
  while (rows->next()) {
    SweepEvent s;
    s.id = rows->integer(0);
    if (const auto detail = detail_object(rows->text(1))) {
      const auto cutoff = detail->find("older_than_ms");
      if (cutoff != detail->end() && cutoff->is_number_integer()) s.cutoff_ms = cutoff->get<int64_t>();
    }
    out.push_back(s);
  }
  return out;
}

std::string refusal_reason(const std::string& detail) {
  const auto object = detail_object(detail);
  if (!object) return "";
  const auto reason = object->find("reason");
  return reason != object->end() && reason->is_string() ? reason->get<std::string>() : "";
}

void intent_events(LedgerReader& db, const RowSink<IntentEvent>& sink) {
  auto rows = db.query("SELECT id, kind, coalesce(intent, ''), coalesce(generation, 0), CASE WHEN kind = " +
                       kind(EventKind::commit_refused) +
                       " THEN detail ELSE '' END FROM events WHERE intent IS NOT NULL ORDER BY intent, id");
  while (rows->next()) {
    IntentEvent e;
    e.id = rows->integer(0);
    e.kind = rows->text(1);
    e.intent = rows->text(2);
    e.generation = rows->integer(3);
    e.refusal = refusal_reason(rows->text(4));
    sink(e);
  }
}

void misplaced_domain_heads(LedgerReader& db, const RowSink<MisplacedHead>& sink) {
  auto rows = db.query(
      "SELECT d.domain, d.head, d.head_seq, c.hash, c.domain, c.seq FROM domains d "
      "LEFT JOIN certificates c ON c.hash = d.head "
      "WHERE d.head IS NOT NULL AND (c.hash IS NULL OR c.domain <> d.domain OR c.seq <> d.head_seq) "
      "ORDER BY d.domain");
  while (rows->next()) {
    MisplacedHead m;
    m.domain = rows->text(0);
    m.head = rows->text(1);
    m.head_seq = rows->integer(2);
    if (!rows->is_null(3)) m.found = MisplacedHead::Found{rows->text(4), rows->integer(5)};
    sink(m);
  }
}

// Since the domain was last evicted: an evicted domain starts again with
// no head, past its old numbers.
void domain_heads_behind(LedgerReader& db, const RowSink<HeadBehind>& sink) {
  const std::string floor = "coalesce((SELECT max(e.seq) FROM events e WHERE e.kind = " +
                            kind(EventKind::domain_evicted) + " AND e.domain = d.domain), 0)";
  // SQLite has no index by (domain, seq): each domain's newest certificate
  // in one pass (a bare column beside max() comes from the max's row).
  const std::string newest = db.is_sqlite()
                                 ? "(SELECT domain, max(seq) AS seq, hash FROM certificates GROUP BY domain) AS c "
                                   "ON c.domain = d.domain WHERE "
                                 : "certificates c ON c.domain = d.domain WHERE c.seq = (SELECT max(seq) FROM "
                                   "certificates WHERE domain = d.domain) AND ";
  auto rows = db.query("SELECT d.domain, d.head_seq, c.hash, c.seq FROM domains d JOIN " + newest +
                       "c.seq > d.head_seq AND c.seq <= d.seq AND c.seq > " + floor + " ORDER BY d.domain");
  while (rows->next()) sink({rows->text(0), rows->text(2), rows->integer(1), rows->integer(3)});
}

void domains_deleted(LedgerReader& db, const RowSink<DeletedDomain>& sink) {
  auto rows = db.query(
      "SELECT c.domain, max(c.seq) FROM certificates c GROUP BY c.domain "
      "HAVING NOT EXISTS (SELECT 1 FROM domains d WHERE d.domain = c.domain) AND NOT EXISTS "
      "(SELECT 1 FROM events e WHERE e.kind = " +
      kind(EventKind::domain_evicted) + " AND e.domain = c.domain) ORDER BY c.domain");
  while (rows->next()) sink({rows->text(0), rows->integer(1)});
}

}  // namespace effectfence
