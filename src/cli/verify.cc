// effectfence verify: checks the audit trail offline.
//
// For every certificate: its hash is the SHA-256 of its stored body; the body
// is canonical JSON and a well-formed certificate whose fields reproduce it;
// (ledger only) the plain columns people query agree with the hashed body;
// its parent resolves to a certificate, and its vector clock strictly
// dominates the parent's (an effect happens after what it was built on).
// Certificates and the append-only event log must agree: a commit writes a
// certificate and one `committed` event naming it, so every certificate has
// exactly one such event of its intent and every such event names a
// certificate of its intent. In a ledger, a done intent must name one of its
// own certificates, a domain head the certificate of its domain at head_seq,
// and no certificate may carry a seq its domain has not handed out yet.
// An SQLite ledger must still hold the triggers that protect it, as built.
// An export must start with its header record and end with its end record,
// whose counts must match, and hold no two certificates for one (domain, seq).
//
// A ledger is checked in one read-only snapshot, row by row with index
// lookups (parent by hash, committed events by intent, certificate by hash),
// so memory stays constant. An export is read line by line; resolving
// parents, events and admissions needs one entry per certificate and per
// event (its id, once seen).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cli/archive_check.h"
#include "cli/options.h"
#include "cli/output.h"
#include "cli/signing_key.h"
#include "cli/subcommand.h"
#include "cli/time_text.h"
#include "cli/commands.h"
#include "cli/signature_check.h"
#include "ledger/history_reads.h"
#include "ledger/ledger_protections.h"
#include "ledger/ledger_reader.h"
#include "ledger/open_ledger.h"
#include "ledger/verify_reads.h"
#include "core/sha256.h"
#include "core/signing.h"
#include "effectfence/certificate.h"
#include "effectfence/fence.h"
#include "effectfence/state_machine.h"
#include "effectfence/json.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "verify";
constexpr size_t kDefaultLimit = 20;

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence verify [--db PATH | --export FILE.jsonl] [--public-key FILE.pub ...]\n"
               "                          [--require-signed] [--archive DIR] [--limit N] [--json]\n\n"
               "Recomputes every certificate's hash from its canonical body, checks that every\n"
               "parent link resolves to a certificate and that each certificate's vector clock\n"
               "dominates its parent's, and that every certificate has exactly one 'committed'\n"
               "event of its intent naming it and every such event names a certificate. On a\n"
               "ledger (opened read-only) it also checks that the columns agree with the hashed\n"
               "bodies, that done intents and domain heads name their own certificates, and that\n"
               "no certificate's seq is beyond its domain's; on an SQLite ledger, that every\n"
               "trigger effectfence built at its schema version is still there, unchanged. An\n"
               "export must begin with its header record and end with its end record (counts\n"
               "matching), and hold one certificate per (domain, seq). On an export of part of a\n"
               "ledger (export --since), parents older than the export are counted, not\n"
               "reported.\n\n"
               "Signatures (effectfence keygen; serve/wrap --signing-key): with --public-key, every\n"
               "signed certificate must carry a signature by one of the keys given that verifies;\n"
               "an unsigned certificate passes only as history from before signing began: it fails\n"
               "if it was committed after the first signed certificate, builds on a signed one, or\n"
               "comes after a signed one in its domain (a certificate rewritten and rehashed loses\n"
               "its signature). Unsigned history is counted. A signature whose certificate is gone\n"
               "fails, and so do public keys given for a ledger none of whose certificates is signed.\n\n"
               "options:\n"
               "  --db PATH      ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --export FILE  check a JSONL file written by effectfence export instead (also --dump FILE)\n"
               "  --public-key FILE  check signatures with this Ed25519 public key (FILE.pub from\n"
               "                 keygen); repeat it for every key the ledger was signed with (rotation)\n"
               "  --require-signed  fail on every unsigned certificate, history included\n"
               "  --archive DIR  check the segments effectfence archive moved old history into, with the\n"
               "                 ledger, as one history: each segment's root hash, their order and chain to\n"
               "                 the ledger's records of them, their signatures (with --public-key) and the\n"
               "                 parent links into them. With --export: the segments the dump's header says\n"
               "                 it continues from, chained to the root it names. Without it, parents that\n"
               "                 were archived are counted and not checked\n"
               "  --limit N      report the first N problems (default %zu); all are counted\n"
               "  --json         one JSON object: {ok, source, path, certificates, events,\n"
               "                 signatures: {keys, verified, unchecked, bad, unsigned_history,\n"
               "                 unsigned_after_signing}, problems_total,\n"
               "                 problems: [{certificate, kind, message, line?}]}\n"
               "  --help         this text\n\n"
               "exit status: 0 all good, 1 tampering or a broken chain found, 2 could not run\n",
               Settings::default_ledger_path("server").c_str(), kDefaultLimit);
}

struct Problem {
  std::string certificate;  // the certificate hash concerned ("" if unknown)
  std::string kind;         // hash_mismatch, missing_parent, ...
  std::string message;
  int64_t line = 0;         // export line number, 0 for a ledger
};

// Keeps the first `limit` problems and counts them all.
class Problems {
 public:
  explicit Problems(size_t limit) : limit_(limit) {}
  void add(Problem p) {
    ++total_;
    if (shown_.size() < limit_) shown_.push_back(std::move(p));
  }
  int64_t total() const { return total_; }
  const std::vector<Problem>& shown() const { return shown_; }

 private:
  size_t limit_;
  int64_t total_ = 0;
  std::vector<Problem> shown_;
};

struct Report {
  SignatureCheck* signatures = nullptr;  // the signature rules, fed as certificates are read
  const std::vector<PublicKey>* keys = nullptr;
  std::optional<std::string> archive_dir;  // --archive: check the segments with the ledger
  // What was archived (a ledger that has archived only), as the ledger
  // records it and, with --archive, as the segments were read.
  struct Archived {
    int64_t segments = 0;
    archive::SegmentCounts recorded;
    int64_t parents_outside = 0;  // ledger certificates whose parent is archived
    int64_t segments_read = 0;
    int64_t pending = 0;
    int64_t signatures_verified = 0;
    std::string continues_from;  // an export's: the root of the last segment before it
    int64_t later = 0;           // an export's: segments in --archive DIR archived after it
  };
  std::optional<Archived> archived;
  std::string source;  // "ledger" or "export"
  std::string path;
  int64_t certificates = 0;
  int64_t events = 0;
  int64_t parents_outside = 0;  // partial exports only
};

// What a certificate without the admission that handed out its seq, and a
// seq handed out by more than one admission, are reported as, in a ledger
// and in an export alike.
std::string not_admitted_message(const std::string& intent, int64_t generation, const std::string& domain,
                                 int64_t seq, const std::string& where) {
  return "no admission of intent '" + intent + "' at generation " + std::to_string(generation) +
         " handed out seq " + std::to_string(seq) + " of domain '" + domain + "'" + where +
         ": no fence issued this certificate";
}

std::string seq_reused_message(const std::string& domain, int64_t seq, int64_t admissions) {
  return "seq " + std::to_string(seq) + " of domain '" + domain + "' was handed out by " +
         std::to_string(admissions) + " admission events; a domain hands out each seq once";
}

// Checks one stored body against its hash. Returns the certificate iff the
// body is a certificate document (even if it does not match the hash), so
// its parent link can still be followed.
std::optional<Certificate> check_body(const std::string& hash, const std::string& body, int64_t line,
                                      Problems& problems) {
  auto problem = [&](const char* kind, const std::string& message) {
    problems.add({hash, kind, message, line});
  };
  const std::string body_hash = sha256_hex(body);
  const bool hash_matches = body_hash == hash;
  if (!hash_matches) problem("hash_mismatch", "the stored body hashes to " + body_hash + ", not to this hash");
  JsonError error;
  auto parsed = parse_strict(body, &error, WideIntegers::as_doubles);
  if (!parsed) {
    problem("not_a_certificate", "the body is not valid JSON (" + error.message + ")");
    return std::nullopt;
  }
  if (!parsed->is_object() || parsed->contains("hash")) {
    problem("not_a_certificate", "the body is not a certificate document");
    return std::nullopt;
  }
  if (canonicalize(*parsed) != body) problem("not_canonical", "the body is not in RFC 8785 canonical form");
  Json with_hash = *parsed;
  with_hash["hash"] = hash;
  auto cert = Certificate::from_json(with_hash);
  if (!cert) {
    problem("not_a_certificate", "the body lacks a certificate field, has an extra one, or one of the wrong type");
    return std::nullopt;
  }
  if (hash_matches && !cert->verify()) {
    problem("fields_mismatch", "the certificate's fields do not reproduce its body (they hash to " +
                                   cert->compute_hash() + ")");
  }
  // What no fence issues, however well it hashes: fence_prepare's inputs
  // are named (intent, domain, tool, agent), and seq and generation count from 1.
  if (cert->seq < 1 || cert->generation < 1 || cert->intent.empty() || cert->domain.empty() ||
      cert->tool.empty() || cert->agent.empty()) {
    problem("not_a_certificate", "no fence issues this certificate: seq " + std::to_string(cert->seq) +
                                     " and generation " + std::to_string(cert->generation) +
                                     " count from 1, and intent, domain, tool and agent are never empty");
  }
  return cert;
}

// The vector clock inside a stored body, if it has one.
std::optional<VectorClock> clock_of_body(const std::string& body) {
  JsonError error;
  auto parsed = parse_strict(body, &error, WideIntegers::as_doubles);
  if (!parsed || !parsed->is_object() || !parsed->contains("vector_clock")) return std::nullopt;
  return VectorClock::from_json(parsed->at("vector_clock"));
}

// The certificate a committed event's detail names ("" if it names none).
std::string certificate_named_by(const Json& detail) {
  if (!detail.is_object()) return "";
  const auto named = detail.find("certificate");
  return named != detail.end() && named->is_string() ? named->get<std::string>() : "";
}

std::string certificate_named_by(const std::string& detail_text) {
  JsonError error;
  auto detail = parse_strict(detail_text, &error, WideIntegers::as_doubles);
  return detail ? certificate_named_by(*detail) : "";
}

// A commit_refused event's reason, from its detail as an export holds it
// (an object, or the text of one).
std::string refusal_of(const Json& detail) {
  std::optional<Json> parsed;
  if (detail.is_string()) {
    JsonError error;
    parsed = parse_strict(detail.get<std::string>(), &error, WideIntegers::as_doubles);
  } else {
    parsed = detail;
  }
  if (!parsed || !parsed->is_object()) return "";
  const auto reason = parsed->find("reason");
  return reason != parsed->end() && reason->is_string() ? reason->get<std::string>() : "";
}

// A certificate must be named by exactly one committed event: none means it
// was never issued by a commit, more means the log claims a second commit.
void check_committed_count(const std::string& hash, int64_t naming, int64_t line, Problems& problems) {
  if (naming == 1) return;
  if (naming == 0) {
    problems.add({hash, "missing_event", "no 'committed' event of its intent names it: no commit issued it", line});
  } else {
    problems.add({hash, "duplicate_event", std::to_string(naming) + " 'committed' events of its intent name it", line});
  }
}

// A committed event must name a certificate of its own intent. event
// describes it for messages; named is the hash its detail names ("" for
// none); certificate_intent is the intent of the certificate under that hash
// in source ("ledger" or "export"), if there is one. Returns true iff the
// event names a certificate of its intent.
bool check_committed_event(const std::string& event, const std::string& intent, const std::string& named,
                           const std::optional<std::string>& certificate_intent, const char* source, int64_t line,
                           Problems& problems) {
  if (named.empty()) {
    problems.add({"", "bad_event", event + " names no certificate in its detail", line});
  } else if (!certificate_intent) {
    problems.add({named, "missing_certificate", event + " names it but it is not in the " + source, line});
  } else if (*certificate_intent != intent) {
    problems.add({named, "wrong_certificate",
                  event + " names it but it is a certificate of intent '" + *certificate_intent + "'", line});
  } else {
    return true;
  }
  return false;
}

void check_dominates(const Certificate& cert, const VectorClock& parent_clock, int64_t line, Problems& problems) {
  if (parent_clock.le(cert.vector_clock) && !(parent_clock == cert.vector_clock)) return;
  problems.add({cert.hash, "clock_not_dominating",
                "vector clock " + cert.vector_clock.to_json().dump() + " does not dominate its parent " +
                    cert.parent + "'s " + parent_clock.to_json().dump(),
                line});
}

// --- a ledger -------------------------------------------------------------

// The columns the views show are not hashed; they must say what the body says.
void check_columns(const StoredCertificate& row, const Certificate& cert, Problems& problems) {
  auto compare = [&](const char* column, const std::string& stored, const std::string& hashed) {
    if (stored == hashed) return;
    problems.add({row.hash, "column_mismatch",
                  std::string("column ") + column + " says '" + stored + "' but the hashed body says '" + hashed + "'",
                  0});
  };
  compare("intent", row.intent, cert.intent);
  compare("domain", row.domain, cert.domain);
  compare("seq", std::to_string(row.seq), std::to_string(cert.seq));
  compare("generation", std::to_string(row.generation), std::to_string(cert.generation));
  compare("parent", row.parent, cert.parent);
  compare("agent", row.agent, cert.agent);
  compare("tool", row.tool, cert.tool);
}

// One event into the history check; a kind it does not know is reported
// elsewhere (the CHECK on events.kind, or bad_record in an export).
void feed_history(HistoryCheck& history, const IntentEvent& e) {
  if (const auto k = event_kind_from_name(e.kind)) history.event(e.id, *k, e.intent, e.generation, e.refusal);
}

// line_of: the export line of an event id (0 for a ledger).
void report_history(const HistoryCheck& history, Problems& problems,
                    const std::function<int64_t(int64_t)>& line_of) {
  for (const HistoryCheck::Finding& f : history.findings()) {
    problems.add({"", "impossible_history",
                  "intent '" + f.intent + "': " + f.message +
                      " (the events were edited, or written by something other than effectfence)",
                  line_of(f.event_id)});
  }
}

// Checks a ledger through the typed reads of src/ledger (history_reads,
// verify_reads): the database finds the rows that break a rule, and this
// class words what each means.
class LedgerVerifier {
 public:
  LedgerVerifier(LedgerReader& db, Problems& problems, ArchiveCheck& archive)
      : db_(db), problems_(problems), archive_(archive) {}

  void run(Report& report) {
    archive_.check_records();
    check_protections();
    check_file_integrity();
    check_certificates(report);
    check_signatures(*report.signatures, report.certificates);
    check_certificates_issued();
    check_certificates_admitted();
    check_committed_events();
    check_done_intents();
    check_effects_stay_done();
    check_domain_heads();
    check_domains_kept();
    check_history();
    report.events = count_events(db_);
  }

 private:
  // Rows are only as trustworthy as the triggers that kept them.
  void check_protections() {
    for (const ProtectionGap& gap : protection_gaps(db_)) {
      const bool view = gap.type == "view";
      const std::string what = view ? "view " + gap.trigger : "trigger " + gap.trigger + " on " + gap.table;
      const std::string risk = view ? "what it shows may hide rows from whoever reads it (the runbook, `fenced`)"
                                    : "what it guards may have been changed through SQL";
      if (gap.changed) {
        problems_.add({"", "protection_changed",
                       what + " is not the one effectfence created: " + risk + "; compare it with schema/schema.sql",
                       0});
      } else {
        problems_.add({"", "protection_missing",
                       what + " was dropped: " + risk + (view ? "" : " since") + "; recreate it from schema/schema.sql",
                       0});
      }
    }
  }

  // The file itself, on SQLite: a damaged index that no longer matches its
  // table passes quick_check, and a lookup through it misses the row it
  // indexes (an intent found fresh again). Each line integrity_check
  // reports is a problem. (Servers check a large ledger's append-only
  // tables only as decisions reach them.)
  void check_file_integrity() {
    for (const std::string& line : integrity_problems(db_)) {
      problems_.add({"", "damaged_file",
                     "SQLite's integrity_check: " + line +
                         ". The file is damaged: decisions read through a damaged index can miss rows; restore it "
                         "from a backup (docs/OPERATIONS.md)",
                     0});
    }
  }

  void check_certificates(Report& report) {
    CertificateWalk walk;
    walk.domain_seq = true;
    auto rows = certificates_in_commit_order(db_, walk);
    while (const auto row = rows.next()) {
      ++report.certificates;
      check_domain_seq(*row);
      auto cert = check_body(row->hash, row->body, 0, problems_);
      if (!cert) continue;
      check_columns(*row, *cert, problems_);
      check_parent(*cert);
    }
  }

  // In commit order, each certificate with its signature if it has one.
  // Ledgers without a signature, checked without keys, are not walked again.
  void check_signatures(SignatureCheck& check, int64_t certificates) {
    if (!holds_signatures(db_) && !check.checks_keys() && !check.requires_signed()) {
      check.unsigned_history_not_walked(certificates);
      return;
    }
    CertificateWalk walk;
    walk.signatures = true;
    auto rows = certificates_in_commit_order(db_, walk);
    while (const auto row = rows.next()) {
      check.certificate({row->hash, row->intent, row->parent, row->domain, row->seq, 0, row->signature});
    }
    for (const OrphanSignature& orphan : orphan_signatures(db_)) check.orphan(orphan.certificate, orphan.key_id);
    check.finish([&](const std::string& hash) { return is_signed(db_, hash); });
  }

  void check_parent(const Certificate& cert) {
    if (cert.parent.empty()) return;
    const auto parent = certificate_body(db_, cert.parent);
    if (!parent) {
      // Archived with its intent: checked against the segments (--archive).
      if (archive_.has_records()) {
        archive_.parent_outside(cert.hash, cert.parent);
        return;
      }
      problems_.add({cert.hash, "missing_parent", "parent " + cert.parent + " is not a certificate in the ledger", 0});
      return;
    }
    // A parent whose body is broken is reported as itself.
    if (auto clock = clock_of_body(*parent)) check_dominates(cert, *clock, 0, problems_);
  }

  // Only the exact details a commit writes match inside the database;
  // anything else, however close, is judged here by parsing its JSON.
  void check_certificates_issued() {
    certificates_not_named_once(db_, [&](const CertificateOfIntent& c) {
      int64_t naming = 0;
      for (const std::string& detail : committed_event_details(db_, c.intent)) {
        if (certificate_named_by(detail) == c.hash) ++naming;
      }
      check_committed_count(c.hash, naming, 0, problems_);
    });
  }

  // Every certificate records an attempt the ledger admitted: an admitted or
  // takeover event of its intent and generation that handed out its domain's
  // seq. A certificate and its committed event inserted by hand have none;
  // and each seq is handed out once, so an admission event inserted too
  // shows as a seq handed out twice.
  void check_certificates_admitted() {
    certificates_not_admitted(db_, [&](const CertificatePlace& c) {
      problems_.add({c.hash, "not_admitted", not_admitted_message(c.intent, c.generation, c.domain, c.seq, ""), 0});
    });
    // The ledger's UNIQUE (domain, seq) says the same, unless it was dropped.
    certificate_seqs_held_twice(db_, [&](const SeqCount& twice) {
      for (const std::string& hash : certificates_at(db_, twice.domain, twice.seq)) {
        problems_.add({hash, "duplicate_seq",
                       std::to_string(twice.count) + " certificates of domain '" + twice.domain + "' are at seq " +
                           std::to_string(twice.seq) + ": the domain's chain forked",
                       0});
      }
    });
    admission_seqs_handed_out_twice(db_, [&](const SeqCount& reused) {
      const auto certs = certificates_at(db_, reused.domain, reused.seq);
      problems_.add({certs.empty() ? "" : certs.front(), "seq_reused",
                     seq_reused_message(reused.domain, reused.seq, reused.count), 0});
    });
  }

  // A domain hands out its numbers in order; a certificate beyond the
  // current one was not admitted through it. An evicted domain has no row
  // (its numbers live on in its domain_evicted event): not compared.
  void check_domain_seq(const StoredCertificate& row) {
    if (!row.domain_seq || row.seq <= *row.domain_seq) return;
    problems_.add({row.hash, "seq_beyond_domain",
                   "seq " + std::to_string(row.seq) + " is beyond the current seq " + std::to_string(*row.domain_seq) +
                       " of domain '" + row.domain + "'",
                   0});
  }

  // Every intent's events, in the order the ledger numbered them, are a
  // path through the state machine (include/effectfence/state_machine.h).
  void check_history() {
    std::vector<int64_t> sweep_ids;
    for (const SweepEvent& s : sweeps()) sweep_ids.push_back(s.id);
    HistoryCheck history(std::move(sweep_ids));
    intent_events(db_, [&](const IntentEvent& e) { feed_history(history, e); });
    report_history(history, problems_, [](int64_t) { return int64_t{0}; });
  }

  // The other direction: every committed event names a certificate of its
  // intent (a certificate rewritten or deleted leaves its event behind).
  void check_committed_events() {
    committed_events_naming_none(db_, [&](const CommittedEvent& e) {
      const std::string event = "'committed' event " + std::to_string(e.id) + " of intent '" + e.intent + "'";
      const std::string named = certificate_named_by(e.detail);
      const auto certificate_of = named.empty() ? std::nullopt : certificate_intent(db_, named);
      check_committed_event(event, e.intent, named, certificate_of, "ledger", 0, problems_);
    });
  }

  // A done intent replays its certificate to late duplicates: it must be
  // one of its own. (Swept intents have no row and are not checked.)
  void check_done_intents() {
    done_intents_naming_foreign(db_, [&](const DoneIntent& d) {
      if (!d.certificate_intent) {
        problems_.add({d.certificate, "missing_certificate",
                       "intent '" + d.intent + "' is done but its certificate is not in the ledger", 0});
      } else {
        problems_.add({d.certificate, "wrong_certificate",
                       "intent '" + d.intent + "' is done with it, but it is a certificate of intent '" +
                           *d.certificate_intent + "'",
                       0});
      }
    });
  }

  // An attempt whose effect ran (its certificate) stays done until swept: not
  // moved to another state at that generation, never cleared after it was
  // committed. Either would let its next prepare be fresh, and the effect run
  // a second time. (A holder may commit after a clear: that records the
  // effect, and its committed event follows the clear.)
  void check_effects_stay_done() {
    attempts_moved_out_of_done(db_, [&](const UndoneAttempt& u) {
      if (admitted_again_after_sweep(u.intent, u.generation, u.committed_at, kNoEventYet)) return;
      problems_.add({u.hash, "effect_undone",
                     "intent '" + u.intent + "' is " + u.state + " at generation " + std::to_string(u.generation) +
                         ", whose effect this certificate records: it was moved out of done, so it could be "
                         "cleared and run again",
                     0});
    });
    attempts_cleared_after_commit(db_, [&](const ClearedAttempt& c) {
      if (admitted_again_after_sweep(c.intent, c.generation, c.committed_at, c.clear_event)) return;
      problems_.add({c.hash, "effect_cleared",
                     "intent '" + c.intent + "' was cleared (by " + c.actor + ") at generation " +
                         std::to_string(c.generation) +
                         ", whose effect this certificate records: its next prepare was fresh, and the effect "
                         "may have run twice",
                     0});
    });
  }

  static constexpr int64_t kNoEventYet = std::numeric_limits<int64_t>::max();

  // Whether intent was admitted again at generation, before event id
  // `before`, after a sweep whose cutoff is past committed_at: one that
  // dropped the done intent, whose next attempt starts over at generation
  // 1. Such an attempt is another one than the certificate's, not it moved
  // out of done. A hand edit writes no admission after a sweep.
  bool admitted_again_after_sweep(const std::string& intent, int64_t generation, int64_t committed_at,
                                  int64_t before) {
    const auto admitted = last_admission_before(db_, intent, generation, before);
    if (!admitted) return false;
    for (const SweepEvent& sweep : sweeps()) {
      if (sweep.id < *admitted && sweep.cutoff_ms && *sweep.cutoff_ms > committed_at) return true;
    }
    return false;
  }

  // Every swept event, read once.
  const std::vector<SweepEvent>& sweeps() {
    if (!sweeps_) sweeps_ = sweep_events(db_);
    return *sweeps_;
  }

  // The next certificate on a domain is chained to its head: the head must
  // be that domain's certificate at head_seq. (Evicted domains have no row.)
  void check_domain_heads() {
    misplaced_domain_heads(db_, [&](const MisplacedHead& m) {
      if (!m.found) {
        problems_.add({m.head, "missing_certificate",
                       "domain '" + m.domain + "' names it as its latest certificate but it is not in the ledger", 0});
      } else {
        problems_.add({m.head, "wrong_certificate",
                       "domain '" + m.domain + "' names it as its latest certificate (seq " +
                           std::to_string(m.head_seq) + "), but it is the certificate of domain '" + m.found->domain +
                           "' at seq " + std::to_string(m.found->seq),
                       0});
      }
    });
  }

  // A domain's head is its newest certificate since it was last evicted,
  // and a domain whose certificates have no row was evicted. Set back or
  // deleted by hand, its next effect would fork the chain or reuse a number.
  void check_domains_kept() {
    domain_heads_behind(db_, [&](const HeadBehind& b) {
      problems_.add({b.newest, "head_behind",
                     "domain '" + b.domain + "' names seq " + std::to_string(b.head_seq) +
                         " as its latest certificate, but this one is at seq " + std::to_string(b.newest_seq) +
                         ": its head was set back, and its next effect would not chain to this one",
                     0});
    });
    domains_deleted(db_, [&](const DeletedDomain& d) {
      problems_.add({"", "domain_missing",
                     "domain '" + d.domain + "' has certificates up to seq " + std::to_string(d.highest_seq) +
                         " but no row and no domain_evicted event: it was deleted by hand, and its next effect "
                         "would be given a sequence number one of them holds",
                     0});
    });
  }

  LedgerReader& db_;
  Problems& problems_;
  ArchiveCheck& archive_;
  std::optional<std::vector<SweepEvent>> sweeps_;
};

// Returns an exit code iff the ledger could not be checked.
std::optional<int> verify_ledger(const std::string& path, Problems& problems, Report& report) {
  auto opened = open_ledger_reader(path);
  if (!opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  std::unique_ptr<LedgerReader> db = std::move(*opened);
  try {
    ArchiveCheck archive(*db, *report.keys);
    LedgerVerifier(*db, problems, archive).run(report);
    if (report.archive_dir) archive.check_directory(*report.archive_dir);
    if (archive.has_records() || report.archive_dir) {
      Report::Archived a;
      a.segments = static_cast<int64_t>(archive.records().size());
      for (const auto& r : archive.records()) {
        a.recorded.certificates += r.counts.certificates;
        a.recorded.signatures += r.counts.signatures;
        a.recorded.events += r.counts.events;
        a.recorded.clears += r.counts.clears;
      }
      a.parents_outside = archive.parents_outside();
      a.segments_read = archive.segments_read();
      a.pending = archive.pending();
      a.signatures_verified = archive.signatures_verified();
      report.archived = a;
    }
    for (const ArchiveFinding& f : archive.findings()) problems.add({f.certificate, f.kind, f.message, 0});
  } catch (const std::exception& e) {
    print_error(kCommand, "reading the ledger", e.what());
    return kExitFailure;
  }
  return std::nullopt;
}

// --- an export ------------------------------------------------------------

struct ExportedCertificate {
  std::string hash;
  std::string parent;
  std::string intent;
  std::string domain;
  int64_t seq = 0;
  int64_t generation = 0;
  VectorClock clock;
  int64_t line = 0;
  int64_t committed_events = 0;  // committed events of its intent naming it
};

struct CommittedEvent {
  std::string certificate;  // "" if its detail names none
  std::string intent;
  Json domain, seq, generation;  // as the record has them
  int64_t line = 0;
};

// What the end record says the dump holds.
struct EndRecord {
  int64_t certificates = 0;
  int64_t events = 0;
  int64_t line = 0;
};

// Export format 1 had no end record; format 2 ends with one.
constexpr int64_t kFirstFormatWithEnd = 2;
constexpr int64_t kNewestFormat = 2;

class ExportVerifier {
 public:
  ExportVerifier(Problems& problems, Report& report) : problems_(problems), report_(report) {}

  void line(int64_t number, const std::string& text) {
    JsonError error;
    auto record = parse_strict(text, &error, WideIntegers::as_doubles);
    if (!record || !record->is_object() || !record->contains("type") || !(*record)["type"].is_string()) {
      problems_.add({"", "bad_record", "not an export record (" + (record ? "no \"type\"" : error.message) + ")",
                     number});
      return;
    }
    const std::string type = (*record)["type"].get<std::string>();
    check_position(number, type);
    ++records_;
    if (type == "export") {
      header(number, *record);
    } else if (type == "end") {
      end(number, *record);
    } else if (type == "event") {
      check_in_window(number, *record, "at_ms");
      event(number, *record);
    } else if (type == "certificate") {
      check_in_window(number, *record, "committed_at_ms");
      certificate(number, *record);
    } else {
      problems_.add({"", "bad_record", "unknown record type '" + type + "'", number});
    }
  }

  // Parent links and events can only be matched once every record has been read.
  void finish() {
    report_.signatures->finish([this](const std::string& hash) { return signed_.count(hash) > 0; });
    check_complete();
    check_history();
    match_committed_events();
    check_admissions();
    for (const ExportedCertificate& c : certificates_) {
      check_committed_count(c.hash, c.committed_events, c.line, problems_);
      check_parent(c);
    }
  }

  const std::optional<ArchivedBefore>& archived() const { return archived_; }
  const std::vector<std::pair<std::string, std::string>>& parents_archived() const { return parents_archived_; }
  bool holds(const std::string& hash) const { return by_hash_.count(hash) > 0; }

 private:
  // The header comes first, the end record last, each once.
  void check_position(int64_t number, const std::string& type) {
    if (records_ == 0 && type != "export") {
      problems_.add({"", "not_an_export",
                     "the first record is not the export header ({\"type\":\"export\",...}): the dump lost its "
                     "beginning, or was not written by effectfence export",
                     number});
    } else if (records_ > 0 && type == "export") {
      problems_.add({"", "bad_record", "an export header that is not the first record", number});
    }
    if (end_) problems_.add({"", "bad_record", "a record after the end record (line " +
                                                    std::to_string(end_->line) + ")", number});
  }

  // An export --since leaves parents before its window out, and so turns
  // the missing-parent check off for them: its header must hold one time,
  // written both ways, that every record is at or after.
  void header(int64_t number, const Json& record) {
    partial_ = record.contains("since") && !record["since"].is_null();
    const auto since_ms = record.find("since_ms");
    const bool has_ms = since_ms != record.end() && !since_ms->is_null();
    if (partial_ || has_ms) {
      const bool agree = partial_ && has_ms && since_ms->is_number_integer() && record["since"].is_string() &&
                         record["since"].get<std::string>() == format_utc(since_ms->get<int64_t>());
      if (agree) {
        since_ms_ = since_ms->get<int64_t>();
      } else {
        partial_ = false;  // held to a whole dump: every parent must be in it
        problems_.add({"", "bad_record",
                       "the export header's since " + record.value("since", Json()).dump() + " and since_ms " +
                           (has_ms ? since_ms->dump() : "null") +
                           " do not name one time, as export writes them: a header edited by hand",
                       number});
      }
    }
    archived_header(number, record);
    const auto format = record.find("format");
    if (format == record.end()) return;  // the oldest dumps name none
    if (!format->is_number_integer() || format->get<int64_t>() < 1) {
      problems_.add({"", "bad_record", "the export header's format is not a version number: " + format->dump(), number});
      return;
    }
    format_ = format->get<int64_t>();
    if (*format_ > kNewestFormat) {
      problems_.add({"", "bad_record",
                     "the dump is in export format " + std::to_string(*format_) + ", newer than this effectfence (" +
                         std::to_string(kNewestFormat) + ") reads: verify it with the effectfence that wrote it",
                     number});
    }
  }

  // An archived ledger's dump names the segments its older history was
  // moved into: parents there are not missing, but checked against the
  // segments with --archive DIR.
  void archived_header(int64_t number, const Json& record) {
    const auto a = record.find("archived");
    if (a == record.end() || a->is_null()) return;
    auto integer = [&](const char* name) -> std::optional<int64_t> {
      const auto v = a->find(name);
      if (v == a->end() || !v->is_number_integer() || v->get<int64_t>() < 0) return std::nullopt;
      return v->get<int64_t>();
    };
    auto hex = [&](const char* name, size_t size) -> std::optional<std::string> {
      const auto v = a->find(name);
      if (v == a->end() || !v->is_string() || v->get<std::string>().size() != size ||
          v->get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos) {
        return std::nullopt;
      }
      return v->get<std::string>();
    };
    const bool object = a->is_object();
    const auto ledger = object ? hex("ledger", 32) : std::nullopt;
    const auto root = object ? hex("root", 64) : std::nullopt;
    const auto segments = object ? integer("segments") : std::nullopt;
    const auto certificates = object ? integer("certificates") : std::nullopt;
    const auto signatures = object ? integer("signatures") : std::nullopt;
    const auto events = object ? integer("events") : std::nullopt;
    const auto clears = object ? integer("clears") : std::nullopt;
    if (!ledger || !root || !segments || *segments < 1 || !certificates || !signatures || !events || !clears) {
      problems_.add({"", "bad_record",
                     "the export header's \"archived\" is not {ledger, segments, root, certificates, signatures, "
                     "events, clears} as export writes it: " + a->dump(),
                     number});
      return;
    }
    archived_ = ArchivedBefore{*ledger, *segments, *root, {*certificates, *signatures, *events, *clears}};
  }

  void end(int64_t number, const Json& record) {
    auto count = [&](const char* name) -> std::optional<int64_t> {
      const auto found = record.find(name);
      if (found == record.end() || !found->is_number_integer()) return std::nullopt;
      return found->get<int64_t>();
    };
    const auto certificates = count("certificates");
    const auto events = count("events");
    if (!certificates || !events) {
      problems_.add({"", "bad_record", "an end record needs integer \"certificates\" and \"events\"", number});
      return;
    }
    if (!end_) end_ = EndRecord{*certificates, *events, number};
  }

  // A dump that stops early has no end record, or one whose counts are not
  // what came before it; either way records are missing.
  void check_complete() {
    if (records_ == 0) {
      problems_.add({"", "not_an_export", "the file holds no export records (empty, or not written by export)", 0});
      return;
    }
    if (!end_) {
      problems_.add({"", "truncated", "no end record: " + why_no_end_record(), 0});
      return;
    }
    if (end_->certificates != report_.certificates || end_->events != report_.events) {
      problems_.add({"", "count_mismatch",
                     "the end record counts " + std::to_string(end_->certificates) + " certificate(s) and " +
                         std::to_string(end_->events) + " event(s), the dump holds " +
                         std::to_string(report_.certificates) + " and " + std::to_string(report_.events),
                     end_->line});
    }
  }

  // The header's format tells a dump cut short from one written before
  // end records existed.
  std::string why_no_end_record() const {
    if (!format_) {
      return "the dump is truncated, or was written by an effectfence from before export format " +
             std::to_string(kFirstFormatWithEnd) + ", which added the end record";
    }
    if (*format_ < kFirstFormatWithEnd) {
      return "the dump is in export format " + std::to_string(*format_) +
             ", written by an effectfence from before end records, or it is truncated (export again to check a "
             "whole dump)";
    }
    return "the dump is truncated (export format " + std::to_string(*format_) + " ends with {\"type\":\"end\",...})";
  }

  // A certificate and its committed event share their time, so an export
  // --since holds both or neither: the match is strict in every export.
  void match_committed_events() {
    for (const CommittedEvent& e : committed_) {
      const auto named = e.certificate.empty() ? by_hash_.end() : by_hash_.find(e.certificate);
      ExportedCertificate* c = named == by_hash_.end() ? nullptr : &certificates_[named->second];
      const std::optional<std::string> certificate_intent = c ? std::optional<std::string>(c->intent) : std::nullopt;
      if (check_committed_event("the 'committed' event of intent '" + e.intent + "'", e.intent, e.certificate,
                                certificate_intent, "export", e.line, problems_)) {
        ++c->committed_events;
        if (e.domain != Json(c->domain) || e.seq != Json(c->seq) || e.generation != Json(c->generation)) {
          problems_.add({c->hash, "bad_event",
                         "the 'committed' event naming it says domain " + e.domain.dump() + ", seq " + e.seq.dump() +
                             ", generation " + e.generation.dump() + "; the certificate is at domain '" + c->domain +
                             "', seq " + std::to_string(c->seq) + ", generation " + std::to_string(c->generation),
                         e.line});
        }
      }
    }
  }

  void check_parent(const ExportedCertificate& c) {
    if (c.parent.empty()) return;
    auto parent = by_hash_.find(c.parent);
    if (parent == by_hash_.end()) {
      if (partial_) {
        ++report_.parents_outside;
      } else if (archived_) {
        parents_archived_.emplace_back(c.hash, c.parent);
      } else {
        problems_.add({c.hash, "missing_parent", "parent " + c.parent + " is not a certificate in the export", c.line});
      }
      return;
    }
    Certificate child;
    child.hash = c.hash;
    child.parent = c.parent;
    child.vector_clock = c.clock;
    check_dominates(child, certificates_[parent->second].clock, c.line, problems_);
  }

  void check_in_window(int64_t number, const Json& record, const char* at_ms) {
    if (!since_ms_) return;
    const auto at = record.find(at_ms);
    if (at == record.end() || !at->is_number_integer() || at->get<int64_t>() >= *since_ms_) return;
    const auto hash = record.find("hash");
    problems_.add({hash != record.end() && hash->is_string() ? hash->get<std::string>() : "", "bad_record",
                   std::string("a record dated before the export's since (") + at_ms + " " + at->dump() + " < " +
                       std::to_string(*since_ms_) + "): the header does not describe this dump",
                   number});
  }

  void event(int64_t number, const Json& record) {
    ++report_.events;
    const auto id = record.find("id");
    if (id == record.end() || !id->is_number_integer()) {
      problems_.add({"", "bad_record", "an event record needs an integer \"id\"", number});
    } else if (auto [first, added] = event_lines_.emplace(id->get<int64_t>(), number); !added) {
      problems_.add({"", "bad_record",
                     "event id " + id->dump() + " appears twice (first at line " + std::to_string(first->second) +
                         "): the ledger numbers each event once",
                     number});
    }
    const auto kind = record.find("kind");
    if (kind == record.end() || !kind->is_string() || !event_kind_from_name(kind->get<std::string>())) {
      problems_.add({"", "bad_record",
                     "an event of a kind the ledger does not write: " +
                         (kind == record.end() ? std::string("none") : kind->dump()),
                     number});
      return;
    }
    keep_for_history(id, *kind, record);
    if (kind->get<std::string>() == "admitted" || kind->get<std::string>() == "takeover") {
      admission(record);
      return;
    }
    if (kind->get<std::string>() != "committed") return;
    const auto intent = record.find("intent");
    const auto detail = record.find("detail");
    committed_.push_back({detail != record.end() ? certificate_named_by(*detail) : "",
                          intent != record.end() && intent->is_string() ? intent->get<std::string>() : "",
                          record.value("domain", Json()), record.value("seq", Json()),
                          record.value("generation", Json()), number});
  }

  // What the history check needs of an event; a whole dump only (a partial
  // one starts in the middle of intents' histories).
  void keep_for_history(Json::const_iterator id, const Json& kind, const Json& record) {
    if (partial_ || id == record.end() || !id->is_number_integer()) return;
    const auto intent = record.find("intent");
    const auto generation = record.find("generation");
    const auto detail = record.find("detail");
    IntentEvent e;
    e.id = id->get<int64_t>();
    e.kind = kind.get<std::string>();
    e.intent = intent != record.end() && intent->is_string() ? intent->get<std::string>() : "";
    e.generation = generation != record.end() && generation->is_number_integer() ? generation->get<int64_t>() : 0;
    if (e.kind == event_kind_name(EventKind::commit_refused) && detail != record.end()) e.refusal = refusal_of(*detail);
    history_.push_back(std::move(e));
  }

  void check_history() {
    if (partial_) return;
    std::vector<int64_t> sweeps;
    for (const IntentEvent& e : history_) {
      if (e.kind == event_kind_name(EventKind::swept)) sweeps.push_back(e.id);
    }
    std::sort(history_.begin(), history_.end(),
              [](const IntentEvent& a, const IntentEvent& b) { return std::tie(a.intent, a.id) < std::tie(b.intent, b.id); });
    HistoryCheck history(std::move(sweeps));
    for (const IntentEvent& e : history_) feed_history(history, e);
    report_history(history, problems_, [this](int64_t id) {
      const auto line = event_lines_.find(id);
      return line == event_lines_.end() ? int64_t{0} : line->second;
    });
  }

  // An admission hands out its domain's seq to an attempt (intent,
  // generation); each certificate records one, and each seq is handed out once.
  void admission(const Json& record) {
    const auto text = [&](const char* name) {
      const auto v = record.find(name);
      return v != record.end() && v->is_string() ? v->get<std::string>() : std::string();
    };
    const auto number = [&](const char* name) {
      const auto v = record.find(name);
      return v != record.end() && v->is_number_integer() ? v->get<int64_t>() : int64_t{0};
    };
    admitted_.insert({text("intent"), number("generation"), text("domain"), number("seq")});
    ++admissions_per_seq_[{text("domain"), number("seq")}];
  }

  // In a whole dump every certificate's admission is there; in an export
  // --since it may be before the window.
  void check_admissions() {
    for (const ExportedCertificate& c : certificates_) {
      if (partial_ || admitted_.count({c.intent, c.generation, c.domain, c.seq})) continue;
      problems_.add({c.hash, "not_admitted",
                     not_admitted_message(c.intent, c.generation, c.domain, c.seq, " in this dump"), c.line});
    }
    for (const auto& [domain_seq, count] : admissions_per_seq_) {
      if (count < 2) continue;
      const auto cert = by_domain_seq_.find(domain_seq);
      std::string hash;
      if (cert != by_domain_seq_.end()) {
        for (const ExportedCertificate& c : certificates_) {
          if (c.line == cert->second) hash = c.hash;
        }
      }
      problems_.add({hash, "seq_reused", seq_reused_message(domain_seq.first, domain_seq.second, count), 0});
    }
  }

  void certificate(int64_t number, const Json& record) {
    ++report_.certificates;
    const auto hash = record.find("hash");
    const auto body = record.find("body");
    if (hash == record.end() || !hash->is_string() || body == record.end() || !body->is_string()) {
      problems_.add({hash != record.end() && hash->is_string() ? hash->get<std::string>() : "", "bad_record",
                     "a certificate record needs string \"hash\" and \"body\"", number});
      return;
    }
    const std::string h = hash->get<std::string>();
    auto cert = check_body(h, body->get<std::string>(), number, problems_);
    if (!cert) return;
    if (by_hash_.count(h)) {
      problems_.add({h, "duplicate", "the certificate appears more than once", number});
      return;
    }
    check_unique_seq(*cert, number);
    signature(h, *cert, record, number);
    by_hash_[h] = certificates_.size();
    certificates_.push_back({h, cert->parent, cert->intent, cert->domain, cert->seq, cert->generation,
                             cert->vector_clock, number, 0});
  }

  // The signature a certificate record carries, if any, into the signature rules.
  void signature(const std::string& hash, const Certificate& cert, const Json& record, int64_t number) {
    SignatureCheck::Certificate c{hash, cert.intent, cert.parent, cert.domain, cert.seq, number, std::nullopt};
    const auto s = record.find("signature");
    if (s != record.end()) {
      const bool well_formed = s->is_object() && s->size() == 3 && s->contains("key_id") &&
                               (*s)["key_id"].is_string() && s->contains("signature") &&
                               (*s)["signature"].is_string() && s->contains("unsigned_before") &&
                               (*s)["unsigned_before"].is_number_integer();
      if (!well_formed) {
        problems_.add({hash, "bad_record",
                       "a certificate's \"signature\" must be {key_id, signature, unsigned_before}: two strings "
                       "and an integer",
                       number});
        return;
      }
      c.signature = CertificateSignature{(*s)["key_id"].get<std::string>(), (*s)["signature"].get<std::string>(),
                                         (*s)["unsigned_before"].get<int64_t>()};
      signed_.insert(hash);
    }
    report_.signatures->certificate(c);
  }

  // A domain hands out each seq once (the ledger's UNIQUE (domain, seq)).
  void check_unique_seq(const Certificate& cert, int64_t number) {
    auto [first, inserted] = by_domain_seq_.emplace(std::make_pair(cert.domain, cert.seq), number);
    if (inserted) return;
    problems_.add({cert.hash, "duplicate_seq",
                   "domain '" + cert.domain + "' seq " + std::to_string(cert.seq) +
                       " already has a certificate (line " + std::to_string(first->second) + ")",
                   number});
  }

  Problems& problems_;
  Report& report_;
  bool partial_ = false;
  std::optional<ArchivedBefore> archived_;  // the header's
  std::vector<std::pair<std::string, std::string>> parents_archived_;  // certificate, parent (in a segment)
  std::vector<IntentEvent> history_;
  std::optional<int64_t> since_ms_;  // the header's, when it names one time both ways
  int64_t records_ = 0;
  std::optional<int64_t> format_;  // the header's
  std::optional<EndRecord> end_;
  std::vector<ExportedCertificate> certificates_;  // in file order
  std::unordered_map<std::string, size_t> by_hash_;
  std::map<std::pair<std::string, int64_t>, int64_t> by_domain_seq_;  // -> line
  std::vector<CommittedEvent> committed_;
  std::unordered_map<int64_t, int64_t> event_lines_;  // event id -> line
  std::set<std::tuple<std::string, int64_t, std::string, int64_t>> admitted_;  // intent, generation, domain, seq
  std::map<std::pair<std::string, int64_t>, int64_t> admissions_per_seq_;
  std::set<std::string> signed_;  // certificates whose record carries a signature
};

// The history an archived ledger's dump continues from: its parents into
// the segments, and with --archive DIR the segments themselves, chained to
// the root the header names. A dump of a ledger that never archived has no
// segments: any in DIR are another history.
void check_export_archive(const ExportVerifier& verifier, Problems& problems, Report& report) {
  if (!verifier.archived()) {
    if (!report.archive_dir) return;
    std::vector<std::string> names;
    (void)archive::list_directory(*report.archive_dir, &names);  // unreadable: no segment counted
    const auto segments = std::count_if(names.begin(), names.end(),
                                        [](const std::string& n) { return archive::segment_number(n).has_value(); });
    if (segments > 0) {
      problems.add({"", "segment_unrecorded",
                    *report.archive_dir + " holds " + std::to_string(segments) +
                        " segment(s), but the dump's ledger had archived nothing when it was exported: they are "
                        "not this dump's history",
                    0});
    }
    return;
  }
  const ArchivedBefore& before = *verifier.archived();
  ArchiveCheck archive(before, *report.keys, [&](const std::string& hash) { return verifier.holds(hash); });
  for (const auto& [certificate, parent] : verifier.parents_archived()) archive.parent_outside(certificate, parent);
  if (report.archive_dir) archive.check_directory(*report.archive_dir);
  Report::Archived a;
  a.segments = before.segments;
  a.recorded = before.counts;
  a.parents_outside = archive.parents_outside();
  a.segments_read = archive.segments_read();
  a.signatures_verified = archive.signatures_verified();
  a.continues_from = before.root;
  a.later = archive.later();
  report.archived = a;
  for (const ArchiveFinding& f : archive.findings()) problems.add({f.certificate, f.kind, f.message, 0});
}

std::optional<int> verify_export(const std::string& path, Problems& problems, Report& report) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    print_error(kCommand, "opening the export", "cannot read " + path);
    return kExitFailure;
  }
  ExportVerifier verifier(problems, report);
  std::string text;
  int64_t number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) continue;
    if (number == 1 && text == kExportCsvHeader) {
      print_error(kCommand, "reading the export",
                  path + " is a CSV export: verify reads JSONL dumps only (effectfence export --format jsonl)");
      return kExitFailure;
    }
    if (number == 1 && text.compare(0, 16, std::string("SQLite format 3\0", 16)) == 0) {
      print_error(kCommand, "reading the export",
                  path + " is an SQLite database, not an export: verify a ledger with --db " + path);
      return kExitFailure;
    }
    verifier.line(number, text);
  }
  if (in.bad()) {
    print_error(kCommand, "reading the export", "read error in " + path);
    return kExitFailure;
  }
  verifier.finish();
  check_export_archive(verifier, problems, report);
  return std::nullopt;
}

// --- output ---------------------------------------------------------------

void print_json(const Report& report, const Problems& problems) {
  Json list = Json::array();
  for (const Problem& p : problems.shown()) {
    Json item = {{"certificate", p.certificate}, {"kind", p.kind}, {"message", p.message}};
    if (p.line > 0) item["line"] = p.line;
    list.push_back(item);
  }
  Json out = {{"ok", problems.total() == 0},
              {"source", report.source},
              {"path", report.path},
              {"certificates", report.certificates},
              {"events", report.events},
              {"problems_total", problems.total()},
              {"problems", list}};
  if (report.source == "export") out["parents_outside_export"] = report.parents_outside;
  if (report.archived) {
    const Report::Archived& a = *report.archived;
    out["archived"] = {{"segments", a.segments},
                       {"certificates", a.recorded.certificates},
                       {"signatures", a.recorded.signatures},
                       {"events", a.recorded.events},
                       {"clears", a.recorded.clears},
                       {"parents_in_segments", a.parents_outside},
                       {"checked", report.archive_dir.has_value()},
                       {"segments_read", a.segments_read},
                       {"pending", a.pending},
                       {"segment_signatures_verified", a.signatures_verified}};
    if (!a.continues_from.empty()) {
      out["archived"]["continues_from"] = a.continues_from;
      out["archived"]["later_segments"] = a.later;
    }
  }
  const SignatureCheck& check = *report.signatures;
  Json keys = Json::array();
  for (const std::string& id : check.key_id_list()) keys.push_back(id);
  const SignatureCheck::Counts& n = check.counts();
  out["signatures"] = {{"keys", keys},
                       {"verified", n.signed_verified},
                       {"unchecked", n.signed_unchecked},
                       {"bad", n.signed_bad},
                       {"unsigned_history", n.unsigned_history},
                       {"unsigned_after_signing", n.unsigned_after}};
  print_json_line(out);
}

// One line: how many certificates are signed and how they checked out.
void print_signature_counts(const SignatureCheck& check) {
  const SignatureCheck::Counts& n = check.counts();
  std::printf("signatures: %lld signed", static_cast<long long>(n.signed_verified + n.signed_unchecked + n.signed_bad));
  if (check.checks_keys()) {
    std::printf(" (%lld verified with key(s) %s, %lld bad or by another key)", static_cast<long long>(n.signed_verified),
                check.key_ids().c_str(), static_cast<long long>(n.signed_bad));
  } else if (n.signed_unchecked > 0) {
    std::printf(" (not checked: give --public-key)");
  }
  std::printf(", %lld unsigned from before signing began", static_cast<long long>(n.unsigned_history));
  if (n.unsigned_after > 0) {
    std::printf(", %lld unsigned where a signature was due", static_cast<long long>(n.unsigned_after));
  }
  std::printf("\n");
}

// One line: what the ledger moved into archive segments, and whether
// they were read.
void print_archived(const Report& report) {
  if (!report.archived) return;
  const Report::Archived& a = *report.archived;
  std::printf("archived%s: %lld segment(s) holding %lld certificate(s), %lld signature(s), %lld event(s), %lld clear(s)",
              a.continues_from.empty() ? "" : " before this dump", static_cast<long long>(a.segments),
              static_cast<long long>(a.recorded.certificates), static_cast<long long>(a.recorded.signatures),
              static_cast<long long>(a.recorded.events), static_cast<long long>(a.recorded.clears));
  if (!a.continues_from.empty()) std::printf("; the dump continues from segment root %s", a.continues_from.c_str());
  if (report.archive_dir) {
    std::printf("; read %lld segment(s) in %s", static_cast<long long>(a.segments_read),
                terminal_safe(*report.archive_dir).c_str());
    if (a.signatures_verified > 0) {
      std::printf(" (%lld signed root(s) verified)", static_cast<long long>(a.signatures_verified));
    }
    if (a.pending > 0) {
      std::printf(", %lld left by an interrupted archive (its rows are still in the ledger; the next archive "
                  "removes it)",
                  static_cast<long long>(a.pending));
    }
    if (a.later > 0) {
      std::printf(", %lld later one(s) archived after the dump (not its history, not read)",
                  static_cast<long long>(a.later));
    }
  } else {
    std::printf("; not read (give --archive DIR)");
  }
  if (a.parents_outside > 0) {
    std::printf("; %lld parent link(s) lead into the segments%s", static_cast<long long>(a.parents_outside),
                report.archive_dir ? "" : " (not checked)");
  }
  std::printf("\n");
}

void print_text(const Report& report, const Problems& problems) {
  std::printf("%s %s: %lld certificate(s), %lld event(s)", report.source.c_str(), terminal_safe(report.path).c_str(),
              static_cast<long long>(report.certificates), static_cast<long long>(report.events));
  if (report.parents_outside > 0) {
    std::printf(" (%lld parent link(s) lead before the export)", static_cast<long long>(report.parents_outside));
  }
  if (problems.total() == 0) {
    std::printf(": every hash, body and parent link checks out\n");
  } else {
    std::printf(": %lld problem(s)\n", static_cast<long long>(problems.total()));
  }
  print_signature_counts(*report.signatures);
  print_archived(report);
  if (problems.total() == 0) return;
  for (const Problem& p : problems.shown()) {
    const std::string where = p.line > 0 ? "line " + std::to_string(p.line) + ": " : "";
    // Hashes and messages quote what the ledger holds: text anyone with SQL access could have written.
    std::printf("  %s%s: %s: %s\n", where.c_str(),
                p.certificate.empty() ? "(no hash)" : terminal_safe(p.certificate).c_str(), p.kind.c_str(),
                terminal_safe(p.message).c_str());
  }
  const int64_t hidden = problems.total() - static_cast<int64_t>(problems.shown().size());
  if (hidden > 0) std::printf("  ... and %lld more (--limit N shows more)\n", static_cast<long long>(hidden));
}

std::optional<size_t> parse_limit(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const size_t n = std::stoul(text);
  return n > 0 ? std::optional<size_t>(n) : std::nullopt;
}

int verify(const ParsedArgs& parsed) {
  std::string error;
  // --dump is another name for --export FILE.
  const auto dump_file = parsed.has("export") ? parsed.value("export") : parsed.value("dump");
  if (parsed.has("export") && parsed.has("dump")) {
    print_error(kCommand, "reading options", "give --export or --dump, not both");
    return kExitFailure;
  }
  if (parsed.has("db") && dump_file) {
    print_error(kCommand, "reading options", "give --db or --export, not both");
    return kExitFailure;
  }
  size_t limit = kDefaultLimit;
  if (auto text = parsed.value("limit")) {
    auto n = parse_limit(*text);
    if (!n) {
      print_error(kCommand, "reading options", "--limit must be a positive number, not '" + *text + "'");
      return kExitFailure;
    }
    limit = *n;
  }
  std::vector<PublicKey> keys;
  for (const std::string& file : parsed.all("public-key")) {
    auto key = PublicKey::from_file(file);
    if (!key.ok()) {
      print_error(kCommand, "reading the public keys", key.status().message() + kKeygenHint);
      return kExitFailure;
    }
    keys.push_back(*std::move(key));
  }
  const std::vector<PublicKey> segment_keys = keys;
  SignatureCheck signatures(std::move(keys), parsed.has("require-signed"));
  Problems problems(limit);
  Report report;
  report.signatures = &signatures;
  report.keys = &segment_keys;
  report.archive_dir = parsed.value("archive");
  std::optional<int> failed;
  if (auto file = dump_file) {
    report.source = "export";
    report.path = *file;
    failed = verify_export(*file, problems, report);
  } else {
    report.source = "ledger";
    const std::string where = resolve_ledger_path(parsed, kCommand);
    report.path = printable_ledger(where);
    failed = verify_ledger(where, problems, report);
  }
  if (failed) return *failed;
  for (const SignatureCheck::Finding& f : signatures.findings()) problems.add({f.certificate, f.kind, f.message, f.line});
  if (parsed.has("json")) {
    print_json(report, problems);
  } else {
    print_text(report, problems);
  }
  return problems.total() == 0 ? kExitOk : kExitProblems;
}

}  // namespace

int run_verify(const Args& args) {
  return run_command({kCommand,
                      {{"db", true},
                       {"export", true},
                       {"dump", true},
                       {"limit", true},
                       {"json", false},
                       {"public-key", true, true},
                       {"require-signed", false},
                       {"archive", true}},
                      print_usage}, args, verify);
}

}  // namespace effectfence::cli
