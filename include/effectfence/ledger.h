// The ledger seam: where intents, domains, certificates, events and counters
// live. The fence's rules (src/fence/rules.cc) are written against LedgerTxn
// only, so a second storage engine implements these two classes and nothing
// in the fence changes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "effectfence/certificate.h"
#include "effectfence/state_machine.h"
#include "effectfence/types.h"

namespace effectfence {

// Which process holds an in-flight intent. A holder on this host whose
// process is gone (or whose pid now belongs to another process) is dead.
struct Holder {
  std::string host;
  std::string boot;    // kernel boot id
  int64_t pid = 0;
  int64_t started = 0; // process start time in clock ticks since boot
  std::string describe() const { return host + ":" + std::to_string(pid); }
};

struct IntentRow {
  std::string intent;
  IntentState state = IntentState::none;
  std::string domain, tool;
  std::string args;          // canonical JSON
  std::string payload_hash;
  std::string agent;
  int64_t seq = 0, generation = 0;
  std::string token;
  std::vector<ReadSetEntry> read_set;
  std::string parent;        // "" for none
  VectorClock known_clock;
  Holder holder;
  int64_t lease_expires_at = 0, admitted_at = 0, updated_at = 0;
  std::string cert_hash, reason;
};

struct DomainRow {
  std::string domain;
  bool exists = false;
  int64_t seq = 0;
  VectorClock clock;
  std::string head;
  int64_t head_seq = 0;
};

struct EventRecord {
  EventKind kind = EventKind::admitted;
  std::string intent, domain;
  int64_t seq = 0, generation = 0;
  std::string actor;
  Json detail = Json::object();
};

// The record an evicted domain leaves: its last seq, so the domain never
// hands out an old sequence number again (see LedgerTxn::load_domain).
inline EventRecord domain_evicted_event(const std::string& domain, int64_t seq) {
  EventRecord e;
  e.kind = EventKind::domain_evicted;
  e.domain = domain;
  e.seq = seq;
  e.actor = "effectfence";
  return e;
}

// One transaction's view of the ledger. Valid only inside Ledger::write or
// Ledger::read. Methods throw on storage errors; the Ledger turns that into
// a ledger_error refusal for the one decision that failed.
class LedgerTxn {
 public:
  virtual ~LedgerTxn() = default;
  // The ledger's own clock for this transaction (ms since the epoch), if it
  // has one shared by every process that uses it: PostgreSQL's now(). nullopt:
  // the ledger lives on this host, whose clock the fence reads itself.
  virtual std::optional<int64_t> clock_ms() { return std::nullopt; }
  virtual std::optional<IntentRow> load_intent(const std::string& intent) = 0;
  // Inserts or replaces the row (bumping its version).
  virtual void save_intent(const IntentRow& row, int64_t now) = 0;
  // save_intent for a row no intent of that name has yet: a ledger may skip
  // looking for one.
  virtual void insert_intent(const IntentRow& row, int64_t now) { save_intent(row, now); }
  // save_intent for an outcome: REQUIRES the stored row differs from row at
  // most in state, cert_hash and reason, so a ledger may write only those.
  virtual void save_outcome(const IntentRow& row, int64_t now) { save_intent(row, now); }
  // Intents in flight whose holder claims to be on host.
  virtual std::vector<IntentRow> in_flight_on_host(const std::string& host) = 0;
  // Admitted, unresolved intents on domain whose lease has not expired.
  virtual int64_t count_live_in_flight(const std::string& domain, int64_t now) = 0;
  // Admitted, unresolved intents on domain whose lease has expired by now.
  virtual std::vector<IntentRow> expired_in_flight(const std::string& domain, int64_t now) = 0;
  // Intents on domain fenced failed or unknown, not yet cleared.
  virtual int64_t count_fenced(const std::string& domain) = 0;
  // The admission (an admitted or takeover event) that handed out this
  // intent's seq on domain under generation, as the SHA-256 of the token it
  // issued: nullopt if there was none, "" if it predates recording that.
  virtual std::optional<std::string> admission_token_hash(const std::string& intent, const std::string& domain,
                                                          int64_t seq, int64_t generation) = 0;

  // A domain never seen reads as {exists=false, seq=highest ever reserved}.
  virtual DomainRow load_domain(const std::string& domain) = 0;
  // Compare-and-swap on the version column: moves seq from expected to
  // expected+1, creating the row if needed. Returns false iff seq != expected.
  virtual bool advance_domain(const std::string& domain, int64_t expected, int64_t now) = 0;
  // load_domain then advance_domain from the seq it read, in one step where
  // the ledger can: the domain as it was before (its clock may be left
  // empty), or nullopt iff it moved in between.
  virtual std::optional<DomainRow> reserve_seq(const std::string& domain, int64_t now) {
    DomainRow d = load_domain(domain);
    if (!advance_domain(domain, d.seq, now)) return std::nullopt;
    return d;
  }
  // After a commit: merges the clock, moves head if seq is the newest.
  virtual void record_domain_effect(const std::string& domain, const VectorClock& clock,
                                    const std::string& cert_hash, int64_t seq, int64_t now) = 0;

  virtual std::optional<Certificate> load_certificate(const std::string& hash) = 0;
  // The vector clock of the certificate with this hash. Certificates never
  // change, so a ledger may answer from a cache (and may know the clock of a
  // hash it has not stored: use load_certificate to learn whether one exists).
  virtual std::optional<VectorClock> certificate_clock(const std::string& hash) {
    auto cert = load_certificate(hash);
    if (!cert) return std::nullopt;
    return cert->vector_clock;
  }
  // canonical_body: what cert.seal() returned (the hash covers exactly it).
  virtual void insert_certificate(const Certificate& cert, const std::string& canonical_body, int64_t now) = 0;
  // The signature of a certificate inserted before it in this transaction
  // (key_id and signature as src/core/signing.h makes them).
  virtual void insert_signature(const std::string& certificate, const std::string& key_id,
                                const std::string& signature, int64_t unsigned_before, int64_t now) = 0;
  // How many unsigned certificates the ledger held when signing began: what
  // its signatures say, or, before its first signature, how many
  // certificates it holds besides the one about to be signed.
  // REQUIRES: called after insert_certificate of that certificate.
  virtual int64_t unsigned_before_signing() = 0;
  virtual void append_event(const EventRecord& event, int64_t now) = 0;
  virtual void add_counters(const Counters& delta) = 0;
  virtual Counters load_counters() = 0;

  // The audited operator clear (the same path as the SQL INSERT INTO clears).
  // Returns ok on success, else the ledger's refusal message.
  virtual Status request_clear(const std::string& intent, const std::string& operator_name,
                               const std::string& reason) = 0;
  // Records that this process replays results for ttl_ms, unless the ledger
  // already keeps them longer. Returns how long the ledger keeps them now.
  virtual int64_t raise_result_ttl(int64_t ttl_ms) = 0;
  // How many done/cleared intents were last changed before cutoff.
  virtual int64_t count_finished(int64_t cutoff) = 0;
  // Deletes done/cleared intents last changed before cutoff (after the swept
  // event that names the cutoff). Returns how many.
  virtual int64_t sweep_finished(int64_t cutoff) = 0;
  // Deletes the domain row iff no intent refers to it.
  virtual bool evict_domain(const std::string& domain, int64_t now) = 0;
};

// How the ledger has been batching, for tests and benchmarks.
struct LedgerMetrics {
  uint64_t transactions = 0;  // committed write or read transactions
  uint64_t decisions = 0;     // write()/read() calls answered
  uint64_t queued = 0;        // calls waiting for the next transaction right now
};

class Ledger {
 public:
  virtual ~Ledger() = default;
  // Runs fn inside a write transaction and returns once it is durable.
  // Concurrent calls may share one transaction (group commit); each fn is
  // still all-or-nothing. Returns a refusal (ledger_busy / ledger_error)
  // iff fn's effects were not committed — then whatever fn computed is void.
  virtual std::optional<Refusal> write(const std::function<void(LedgerTxn&)>& fn) = 0;
  // write() without blocking the caller: done receives what write() would
  // have returned, once the transaction is durable (or failed), on a thread
  // of the ledger's, never inside a transaction. fn runs on another thread
  // too, so it must own everything it touches. The default blocks.
  using WriteDone = std::function<void(std::optional<Refusal>)>;
  virtual void write_async(std::function<void(LedgerTxn&)> fn, WriteDone done) { done(write(fn)); }
  // Runs fn on a consistent read-only snapshot.
  virtual std::optional<Refusal> read(const std::function<void(LedgerTxn&)>& fn) = 0;
  // Bumped whenever another connection (process, operator) changed the file.
  virtual uint64_t external_changes() const = 0;
  // Whether external_changes() moves at all. Without it a certificate
  // cached in memory may outlive its row (swept by another process, the
  // intent admitted and committed afresh there, the old result replayed
  // here over the new one), so the fast path answers nothing from memory.
  virtual bool sees_external_changes() const { return true; }
  virtual std::string describe() const = 0;
  virtual LedgerMetrics metrics() const = 0;
  // True iff another connection held the write lock while this ledger was
  // opened (an operator's open transaction, a VACUUM): it opened all the
  // same, and its writes wait for that lock (ledger_busy past the timeout).
  virtual bool locked_at_open() const { return false; }
  // Finishes every write already queued and delivers every asynchronous
  // answer, then refuses new work (ledger_error, nothing decided). The owner
  // calls it before destroying the ledger, so answers delivered on the way
  // out may still use it. Idempotent; not to be called from inside a done.
  virtual void close() {}
};

// Why a ledger could not be opened. Never "created a new one instead".
// invalid_settings: the Settings themselves (a lease under 1 ms is over when
// granted, so every duplicate would be admitted); no file was touched.
enum class OpenErrorCode {
  not_a_ledger,
  corrupt,
  newer_schema,
  unwritable,
  busy,
  io,
  unreachable,
  auth,
  invalid_settings,
  linked,  // one file under several names (hard links): the names would not fence each other
};
struct OpenError {
  OpenErrorCode code;
  std::string message;  // names the file and what to do
};
const char* open_error_name(OpenErrorCode code);

}  // namespace effectfence
