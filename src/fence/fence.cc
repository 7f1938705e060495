#include "effectfence/fence.h"

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <stdexcept>

#include "core/random_token.h"
#include "core/sha256.h"
#include "core/utf8_length.h"
#include "core/mutex.h"
#include "fence/fast_path.h"
#include "fence/fence_internal.h"
#include "fence/rules.h"
#include "fence/sealed_ahead.h"
#include "ledger/holder.h"
#include "ledger/open_ledger.h"

namespace effectfence {
namespace {

// An argument that cannot describe an action: which, and what is wrong with it.
Refusal invalid(const std::string& field, const char* problem, Json more = Json::object()) {
  more["field"] = field;
  more["problem"] = problem;
  return Refusal{Reason::invalid_request, Cause::bad_argument, std::move(more)};
}

Refusal unencodable(const std::string& field, const std::string& error) {
  return invalid(field, "unencodable", {{"error", error}});
}

bool has_nul(const std::string& text) { return text.find('\0') != std::string::npos; }

// No admission issues a ticket with a NUL in it; PostgreSQL could not even
// be asked about one.
std::optional<Refusal> check_ticket(const Ticket& ticket) {
  if (!has_nul(ticket.intent) && !has_nul(ticket.domain) && !has_nul(ticket.token)) return std::nullopt;
  return Refusal{Reason::ticket_invalid, Cause::ticket_has_nul};
}

std::optional<Refusal> refuse_nul(const char* field, const std::string& value) {
  if (!has_nul(value)) return std::nullopt;
  return invalid(field, "nul");
}

std::optional<Refusal> check_name(const char* field, const std::string& value) {
  if (value.empty()) return invalid(field, "empty");
  // PostgreSQL text cannot hold it: names that differ only after it would be
  // one name there. Refused on every ledger, so a name means the same on each.
  if (auto refusal = refuse_nul(field, value)) return refusal;
  if (utf8_length(value) > kMaxNameCharacters) {
    return invalid(field, "too_long", {{"limit", kMaxNameCharacters}});
  }
  JsonError error;
  if (!validate_canonicalizable(Json(value), &error)) return unencodable(field, error.message);
  return std::nullopt;
}

// Validates a request and computes its canonical form and payload hash.
std::variant<rules::Attempt, Refusal> make_attempt(PrepareRequest req) {
  for (const auto& [field, value] : {std::pair<const char*, const std::string*>{"intent", &req.intent},
                                     {"domain", &req.domain},
                                     {"tool", &req.tool},
                                     {"agent", &req.agent}}) {
    if (auto refusal = check_name(field, *value)) return *refusal;
  }
  for (const ReadSetEntry& e : req.read_set) {
    if (auto refusal = check_name("read_set domain", e.domain)) return *refusal;
    if (e.seq < 0) return invalid("read_set seq", "negative_seq", {{"domain", e.domain}});
  }
  rules::Attempt attempt;
  try {
    attempt.canonical_args = canonicalize(req.args);  // validates as it goes
  } catch (const std::invalid_argument& e) {
    return unencodable("args", e.what());
  }
  // canonicalize({"tool": tool, "args": args}), spelled out so the arguments
  // are not copied and canonicalized twice: RFC 8785 puts "args" first.
  attempt.payload_hash =
      sha256_hex("{\"args\":" + attempt.canonical_args + ",\"tool\":" + canonicalize(Json(req.tool)) + "}");
  attempt.request = std::move(req);
  return attempt;
}

// Free text for the audit log (a reason; a tool's error in it) with any NUL
// written as the escape \u0000: PostgreSQL text cannot hold the character.
std::string storable_text(std::string text) {
  for (size_t at = text.find('\0'); at != std::string::npos; at = text.find('\0', at)) text.replace(at, 1, "\\u0000");
  return text;
}

void create_parent_directories(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    ::mkdir(path.substr(0, pos).c_str(), 0700);  // EEXIST is fine; open reports real failures
  }
}

// A synchronous call: its asynchronous form told to wait on the caller's
// thread (Wait::caller), then the outcome done received.
template <typename Outcome, typename Start>
Outcome wait_for(Start&& start) {
  std::optional<Outcome> outcome;
  start([&outcome](Outcome answer) { outcome = std::move(answer); });
  return std::move(*outcome);
}

}  // namespace

// Everything the public Fence hides: the ledger, the in-process fast path,
// the certificates sealed ahead, the counters and the admissions nobody
// received. Thread-safe as Fence is.
struct Fence::Impl {
  Impl(Settings settings, std::unique_ptr<Ledger> ledger);
  ~Impl();

  struct PendingPrepare;
  struct PendingCommit;

  // Records this process's result TTL in the ledger if it is longer than
  // what is there, so a sweep by anyone (an operator's by hand too) keeps
  // the results this process promises, before its first sweep of its own.
  void promise_result_ttl();
  // The rules' context for one transaction; its time is lease_now(txn).
  rules::Context context(LedgerTxn& txn) const;
  int64_t lease_now(LedgerTxn& txn) const;
  void tally(const PrepareOutcome& outcome, bool decided_here);

  // Where a verb waits for the ledger's decision. caller: on the calling
  // thread, done called before the verb returns (the synchronous calls,
  // whose answers so never queue behind other calls' dones on the ledger's
  // answer thread); ledger: not at all, done called on a ledger thread.
  enum class Wait { caller, ledger };

  // The verbs, one path each; each answers through done exactly once.
  void prepare(PrepareRequest request, Wait wait, PrepareDone done);
  void commit(const Ticket& ticket, Json result, Wait wait, CommitDone done);
  void abort(const Ticket& ticket, std::string reason, std::optional<Json> unrecorded_result, Wait wait,
             AbortDone done);
  void heartbeat(const Ticket& ticket, Wait wait, HeartbeatDone done);
  void clear(std::string intent, std::string operator_name, std::string reason, Wait wait, ClearDone done);
  void withdraw_async(const Ticket& ticket, const std::string& why, std::function<void(bool)> done);
  bool fence_unknown(const Ticket& ticket, const std::string& why);

  std::variant<IntentStatus, Refusal> intent_status(const std::string& intent);
  std::variant<DomainStatus, Refusal> domain_status(const std::string& domain);
  std::variant<Stats, Refusal> stats();

  // Maintenance's (see fence_internal.h).
  int64_t sweep();
  bool evict_domain(const std::string& domain);
  int64_t reap_dead_holders();
  int64_t take_back_unanswered();
  int64_t fence_own_in_flight(const std::string& why, std::vector<std::string>* left_in_flight);

  // The halves of prepare around the ledger: begin_prepare returns the
  // outcome when it needs no ledger, else what the ledger must decide.
  std::variant<PrepareOutcome, std::shared_ptr<PendingPrepare>> begin_prepare(PrepareRequest request);
  PrepareOutcome finish_prepare(PendingPrepare& pending, const std::optional<Refusal>& failure);
  // recorded: this call recorded the outcome (a retry is not counted again).
  // epoch_before: the ledger's external_changes() before the commit was asked for.
  CommitOutcome finish_commit(const Ticket& ticket, CommitOutcome outcome, bool recorded, uint64_t epoch_before);
  // The ticket no longer holds its intent here (aborted, refused, lost).
  void released(const Ticket& ticket);
  // ledger_->write, adding the fast path's pending counters to the same transaction.
  std::optional<Refusal> write(const std::function<void(LedgerTxn&)>& fn);
  // The same, done called as wait says.
  void write(Wait wait, std::function<void(LedgerTxn&)> fn, Ledger::WriteDone done);
  Counters take_pending();
  void restore_pending(const Counters& pending);

  Settings settings_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<FastPath> fast_;
  std::unique_ptr<SealedAhead> sealed_ahead_;  // certificates sealed off the ledger's writer
  mutable Mutex counters_mu_;
  Counters process_ GUARDED_BY(counters_mu_);  // every outcome of this Fence
  Counters pending_ GUARDED_BY(counters_mu_);  // fast-path outcomes not yet added to the ledger's counters
  std::atomic<bool> admitting_{true};
  // An attempt whose admission may be on record with nobody holding its
  // ticket (see take_back_unanswered).
  struct UnansweredAdmission {
    std::string intent;
    std::string token;
  };
  Mutex unanswered_mu_;
  std::vector<UnansweredAdmission> unanswered_ GUARDED_BY(unanswered_mu_);
};

std::variant<std::unique_ptr<Fence>, OpenError> Fence::open(Settings settings) {
  // A lease of 0 is expired the moment it is granted: every duplicate would be admitted.
  // Ten years at most, as from the environment: now + lease must not overflow.
  if (settings.lease_ttl_ms < 1 || settings.lease_ttl_ms > Settings::kMaxLifetimeMs) {
    return OpenError{OpenErrorCode::invalid_settings, "the lease (" + std::to_string(settings.lease_ttl_ms) +
                                                          " ms) must be from 1 ms to ten years; nothing was opened"};
  }
  if (settings.result_ttl_ms < 0 || settings.result_ttl_ms > Settings::kMaxLifetimeMs) {
    return OpenError{OpenErrorCode::invalid_settings, "the result lifetime (" +
                                                          std::to_string(settings.result_ttl_ms) +
                                                          " ms) must be from 0 to ten years; nothing was opened"};
  }
  if (settings.create_parent_directories && !is_postgres_ledger(settings.ledger_path)) {
    create_parent_directories(settings.ledger_path);
  }
  // Botan sets up its hash and RNG state lazily; doing it here, on one
  // thread, keeps that first use out of the concurrent prepares.
  sha256_hex("");
  random_token_hex();
  auto opened = open_ledger(settings.ledger_path, settings.busy_timeout_ms);
  if (auto* error = std::get_if<OpenError>(&opened)) return *error;
  auto impl = std::make_unique<Impl>(std::move(settings), std::move(std::get<std::unique_ptr<Ledger>>(opened)));
  // A ledger another connection holds locked gets these from maintenance,
  // once the lock is let go: waiting for it here would delay the server's
  // start by a busy timeout for each.
  if (!impl->ledger_->locked_at_open()) {
    impl->reap_dead_holders();
    if (impl->settings_.promises_result_ttl) impl->promise_result_ttl();
  }
  return std::unique_ptr<Fence>(new Fence(std::move(impl)));
}

Fence::Fence(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Fence::~Fence() = default;

void Fence::Impl::promise_result_ttl() {
  // Best effort: a ledger that cannot take it now gets it with the first sweep.
  ledger_->write([&](LedgerTxn& txn) { txn.raise_result_ttl(settings_.result_ttl_ms); });
}

Fence::Impl::Impl(Settings settings, std::unique_ptr<Ledger> ledger)
    : settings_(std::move(settings)),
      ledger_(std::move(ledger)),
      fast_(std::make_unique<FastPath>()),
      sealed_ahead_(std::make_unique<SealedAhead>()) {
  fast_->set_cache_ttl(std::min<int64_t>(settings_.result_ttl_ms, 600'000));
  // Answers from memory only while the ledger can say another connection changed it.
  fast_->set_answers_from_memory(ledger_->sees_external_changes());
}

Fence::Impl::~Impl() {
  const Counters pending = take_pending();
  if (pending.total_attempts() > 0) {
    ledger_->write([&](LedgerTxn& txn) { txn.add_counters(pending); });
  }
  // Closed here, while fast_, the counters and ledger_ itself still exist:
  // the ledger's last asynchronous answers run on its way out and use them.
  ledger_->close();
  ledger_.reset();
}

int64_t Fence::Impl::lease_now(LedgerTxn& txn) const {
  if (settings_.ledger_clock_ms) return settings_.ledger_clock_ms();
  if (auto ledger_time = txn.clock_ms()) return *ledger_time;
  // The system clock of the host the file lives on, shared by every process
  // that opens it.
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

rules::Context Fence::Impl::context(LedgerTxn& txn) const {
  rules::Context ctx;
  ctx.now = lease_now(txn);
  ctx.lease_ttl_ms = settings_.lease_ttl_ms;
  ctx.me = settings_.holder ? *settings_.holder : this_process();
  ctx.is_dead = settings_.holder_is_dead ? rules::IsDead(settings_.holder_is_dead) : rules::IsDead(holder_is_dead);
  ctx.is_alive =
      settings_.holder_is_alive ? rules::IsAlive(settings_.holder_is_alive) : rules::IsAlive(holder_is_alive_here);
  ctx.admitting = admitting_.load();
  ctx.signer = settings_.signer.get();
  return ctx;
}

void Fence::Impl::tally(const PrepareOutcome& outcome, bool decided_here) {
  Counters delta;
  if (std::holds_alternative<Admitted>(outcome)) delta.admitted = 1;
  if (std::holds_alternative<Replayed>(outcome)) delta.replayed = 1;
  if (const Refusal* r = refusal_of(outcome)) {
    switch (r->reason) {
      case Reason::in_flight: delta.refused_in_flight = 1; break;
      case Reason::domain_race: delta.refused_domain_race = 1; break;
      case Reason::stale_read_set: delta.refused_stale_read_set = 1; break;
      case Reason::prior_failure: delta.refused_prior_failure = 1; break;
      case Reason::payload_mismatch: delta.refused_payload_mismatch = 1; break;
      default: break;
    }
  }
  MutexLock lock(&counters_mu_);
  process_ += delta;
  if (decided_here) pending_ += delta;
}

std::optional<Refusal> Fence::Impl::write(const std::function<void(LedgerTxn&)>& fn) {
  const Counters pending = take_pending();
  auto failure = ledger_->write([&](LedgerTxn& txn) {
    txn.add_counters(pending);
    fn(txn);
  });
  if (failure) restore_pending(pending);
  return failure;
}

Counters Fence::Impl::take_pending() {
  MutexLock lock(&counters_mu_);
  Counters pending = pending_;
  pending_ = Counters{};
  return pending;
}

void Fence::Impl::restore_pending(const Counters& pending) {
  MutexLock lock(&counters_mu_);
  pending_ += pending;
}

void Fence::Impl::write(Wait wait, std::function<void(LedgerTxn&)> fn, Ledger::WriteDone done) {
  if (wait == Wait::caller) {
    done(write(fn));
    return;
  }
  const Counters pending = take_pending();
  ledger_->write_async(
      [pending, fn = std::move(fn)](LedgerTxn& txn) {
        txn.add_counters(pending);
        fn(txn);
      },
      [this, pending, done = std::move(done)](std::optional<Refusal> failure) {
        if (failure) restore_pending(pending);
        done(std::move(failure));
      });
}

// What a prepare carries from before the ledger to after it.
struct Fence::Impl::PendingPrepare {
  rules::Attempt attempt;
  FastPath::Entry entry;
  int64_t now = 0;
  PrepareOutcome outcome = Refusal{Reason::ledger_error, Cause::no_decision};
  IntentRow admitted;  // what an admission recorded
};

struct Fence::Impl::PendingCommit {
  Ticket ticket;
  Json result;
  std::optional<rules::Sealed> sealed;
  uint64_t epoch_before = 0;  // the ledger epoch before the decision was asked for
  CommitOutcome outcome = Refusal{Reason::ledger_error, Cause::no_decision};
  bool recorded = false;  // false for a retried commit: counted once
};

std::variant<PrepareOutcome, std::shared_ptr<Fence::Impl::PendingPrepare>> Fence::Impl::begin_prepare(
    PrepareRequest request) {
  auto made = make_attempt(std::move(request));
  if (auto* refusal = std::get_if<Refusal>(&made)) return PrepareOutcome{std::move(*refusal)};
  auto pending = std::make_shared<PendingPrepare>();
  pending->attempt = std::move(std::get<rules::Attempt>(made));
  pending->now = settings_.now_ms();
  pending->entry = fast_->enter(pending->attempt, pending->now, ledger_->external_changes());
  if (pending->entry.decided) {
    tally(*pending->entry.decided, /*decided_here=*/true);
    return std::move(*pending->entry.decided);
  }
  pending->attempt.token = random_token_hex();
  pending->attempt.token_sha256 = sha256_hex(pending->attempt.token);
  return pending;
}

PrepareOutcome Fence::Impl::finish_prepare(PendingPrepare& pending, const std::optional<Refusal>& failure) {
  if (failure) pending.outcome = *failure;
  if (failure && failure->cause == Cause::outcome_unknown) {
    // Its admission may be on record, and nobody has its ticket.
    MutexLock lock(&unanswered_mu_);
    unanswered_.push_back(UnansweredAdmission{pending.attempt.request.intent, pending.attempt.token});
  }
  fast_->leave(pending.attempt, pending.entry, pending.outcome, pending.now);
  if (!failure && std::holds_alternative<Admitted>(pending.outcome)) sealed_ahead_->admitted(pending.admitted);
  if (const auto* replayed = std::get_if<Replayed>(&pending.outcome)) sealed_ahead_->certified(replayed->cert);
  tally(pending.outcome, /*decided_here=*/false);
  return std::move(pending.outcome);
}

void Fence::Impl::prepare(PrepareRequest request, Wait wait, PrepareDone done) {
  auto begun = begin_prepare(std::move(request));
  if (auto* decided = std::get_if<PrepareOutcome>(&begun)) {
    done(std::move(*decided));
    return;
  }
  auto pending = std::get<std::shared_ptr<PendingPrepare>>(std::move(begun));
  write(wait,
        [this, pending](LedgerTxn& txn) {
                pending->outcome = rules::prepare(txn, pending->attempt, context(txn), &pending->admitted);
              },
              [this, pending, done = std::move(done)](std::optional<Refusal> failure) {
                done(finish_prepare(*pending, failure));
              });
}

void Fence::Impl::commit(const Ticket& ticket, Json result, Wait wait, CommitDone done) {
  if (auto refusal = check_ticket(ticket)) {
    done(*refusal);
    return;
  }
  JsonError error;
  if (!validate_canonicalizable(result, &error)) {
    done(unencodable("result", error.message));
    return;
  }
  auto pending = std::make_shared<PendingCommit>();
  pending->ticket = ticket;
  pending->result = std::move(result);
  pending->epoch_before = ledger_->external_changes();
  pending->sealed = sealed_ahead_->seal(pending->ticket, pending->result);
  write(
      wait,
      [this, pending](LedgerTxn& txn) {
        pending->outcome = rules::commit(txn, pending->ticket, pending->result, context(txn), &pending->recorded,
                                         pending->sealed ? &*pending->sealed : nullptr);
      },
      [this, pending, done = std::move(done)](std::optional<Refusal> failure) {
        // On a ledger failure nothing changed: the ticket still holds the
        // intent (and this process keeps refusing duplicates) until the
        // commit is retried.
        if (failure) {
          done(std::move(*failure));
          return;
        }
        done(finish_commit(pending->ticket, std::move(pending->outcome), pending->recorded, pending->epoch_before));
      });
}

CommitOutcome Fence::Impl::finish_commit(const Ticket& ticket, CommitOutcome outcome, bool recorded,
                                         uint64_t epoch_before) {
  if (auto* cert = std::get_if<Certificate>(&outcome)) {
    fast_->committed(ticket, *cert, settings_.now_ms(), epoch_before);
    sealed_ahead_->certified(*cert);
    MutexLock lock(&counters_mu_);
    if (recorded) process_.committed += 1;
  } else {
    released(ticket);
  }
  return outcome;
}

void Fence::Impl::released(const Ticket& ticket) {
  fast_->released(ticket);
  sealed_ahead_->forget(ticket);
}

void Fence::Impl::abort(const Ticket& ticket, std::string reason, std::optional<Json> unrecorded_result, Wait wait,
                        AbortDone done) {
  if (auto refusal = check_ticket(ticket)) {
    done(*refusal);
    return;
  }
  struct PendingAbort {
    Ticket ticket;
    std::string reason;
    std::optional<Json> unrecorded_result;
    AbortOutcome outcome = Refusal{Reason::ledger_error, Cause::no_decision};
    bool recorded = false;
  };
  auto pending = std::make_shared<PendingAbort>();
  pending->ticket = ticket;
  pending->reason = storable_text(std::move(reason));
  pending->unrecorded_result = std::move(unrecorded_result);
  write(
      wait,
      [this, pending](LedgerTxn& txn) {
        pending->outcome = rules::abort(txn, pending->ticket, pending->reason, context(txn), &pending->recorded,
                                        pending->unrecorded_result ? &*pending->unrecorded_result : nullptr);
      },
      [this, pending, done = std::move(done)](std::optional<Refusal> failure) {
        if (failure) {
          done(std::move(*failure));
          return;
        }
        released(pending->ticket);
        if (pending->recorded) {
          MutexLock lock(&counters_mu_);
          process_.aborted += 1;
        }
        done(std::move(pending->outcome));
      });
}

void Fence::Impl::withdraw_async(const Ticket& ticket, const std::string& why, std::function<void(bool)> done) {
  auto withdrawn = std::make_shared<bool>(false);
  write(
      Wait::ledger,
      [this, ticket, why, withdrawn](LedgerTxn& txn) {
        *withdrawn = rules::withdraw(txn, ticket.intent, ticket.token, why, context(txn));
      },
      [this, ticket, withdrawn, done = std::move(done)](std::optional<Refusal> failure) {
        const bool taken_back = !failure && *withdrawn;
        if (taken_back) {
          released(ticket);
          MutexLock lock(&counters_mu_);
          process_.aborted += 1;
        }
        if (done) done(taken_back);
      });
}

void Fence::Impl::heartbeat(const Ticket& ticket, Wait wait, HeartbeatDone done) {
  if (auto refusal = check_ticket(ticket)) {
    done(*refusal);
    return;
  }
  auto outcome = std::make_shared<HeartbeatOutcome>(Refusal{Reason::ledger_error, Cause::no_decision});
  write(wait, [this, ticket, outcome](LedgerTxn& txn) { *outcome = rules::heartbeat(txn, ticket, context(txn)); },
              [this, ticket, outcome, done = std::move(done)](std::optional<Refusal> failure) {
                if (failure) {
                  done(std::move(*failure));
                  return;
                }
                if (!std::holds_alternative<Extended>(*outcome)) released(ticket);
                done(std::move(*outcome));
              });
}

void Fence::Impl::clear(std::string intent, std::string operator_name, std::string reason, Wait wait,
                        ClearDone done) {
  if (auto refusal = check_name("intent", intent)) return done(*refusal);
  if (auto refusal = check_name("operator", operator_name)) return done(*refusal);
  if (reason.empty()) return done(invalid("reason", "missing"));
  auto outcome = std::make_shared<ClearOutcome>(Refusal{Reason::ledger_error, Cause::no_decision});
  write(
      wait,
      [this, intent = std::move(intent), operator_name = std::move(operator_name),
       reason = storable_text(std::move(reason)), outcome](LedgerTxn& txn) {
        *outcome = rules::clear(txn, intent, operator_name, reason, context(txn));
      },
      [outcome, done = std::move(done)](std::optional<Refusal> failure) {
        if (failure) {
          done(std::move(*failure));
          return;
        }
        done(std::move(*outcome));
      });
}

std::variant<IntentStatus, Refusal> Fence::Impl::intent_status(const std::string& intent) {
  if (auto refusal = refuse_nul("intent", intent)) return *refusal;
  IntentStatus status;
  status.intent = intent;
  auto failure = ledger_->read([&](LedgerTxn& txn) {
    auto row = txn.load_intent(intent);
    if (!row) return;
    status.state = row->state;
    status.domain = row->domain;
    status.tool = row->tool;
    status.agent = row->agent;
    JsonError ignored;
    status.args = parse_strict(row->args, &ignored, WideIntegers::as_doubles).value_or(Json());
    status.seq = row->seq;
    status.generation = row->generation;
    status.lease_expires_at_ms = row->lease_expires_at;
    status.updated_at_ms = row->updated_at;
    status.reason = row->reason;
    if (row->state == IntentState::done) status.cert = txn.load_certificate(row->cert_hash);
  });
  if (failure) return *failure;
  return status;
}

std::variant<DomainStatus, Refusal> Fence::Impl::domain_status(const std::string& domain) {
  if (auto refusal = refuse_nul("domain", domain)) return *refusal;
  DomainStatus status;
  status.domain = domain;
  auto failure = ledger_->read([&](LedgerTxn& txn) {
    const DomainRow row = txn.load_domain(domain);
    status.exists = row.exists;
    status.seq = row.seq;
    status.clock = row.clock;
    status.head = row.head;
    status.in_flight = rules::unsettled_actions(txn, domain, context(txn));
    status.fenced = txn.count_fenced(domain);
  });
  if (failure) return *failure;
  return status;
}

std::variant<Stats, Refusal> Fence::Impl::stats() {
  Stats stats;
  auto failure = ledger_->read([&](LedgerTxn& txn) { stats.ledger = txn.load_counters(); });
  if (failure) return *failure;
  MutexLock lock(&counters_mu_);
  stats.ledger += pending_;  // decided here, not yet written
  stats.process = process_;
  return stats;
}

int64_t Fence::Impl::sweep() {
  int64_t swept = -1;
  auto failure = ledger_->write([&](LedgerTxn& txn) {
    const int64_t now = lease_now(txn);
    // The ledger's TTL, not ours: another process may have promised longer.
    const int64_t ttl = txn.raise_result_ttl(settings_.result_ttl_ms);
    const int64_t cutoff = now - ttl;
    const int64_t due = txn.count_finished(cutoff);
    swept = 0;
    if (due == 0) return;
    // The event first: schema 9 deletes a done intent only under the cutoff
    // of the latest swept event.
    EventRecord e;
    e.kind = EventKind::swept;
    e.actor = this_process().describe();
    e.detail = {{"intents", due}, {"older_than_ms", cutoff}, {"result_ttl_ms", ttl}};
    txn.append_event(e, now);
    swept = txn.sweep_finished(cutoff);
    if (swept != due) throw std::runtime_error("the finished intents changed during the sweep; it runs again later");
  });
  return failure ? -1 : swept;
}

bool Fence::Impl::evict_domain(const std::string& domain) {
  bool evicted = false;
  auto failure = ledger_->write([&](LedgerTxn& txn) { evicted = txn.evict_domain(domain, lease_now(txn)); });
  return !failure && evicted;
}

int64_t Fence::Impl::reap_dead_holders() {
  int64_t reaped = 0;
  auto failure = ledger_->write([&](LedgerTxn& txn) { reaped = rules::reap_dead_holders(txn, context(txn)); });
  return failure ? 0 : reaped;
}

int64_t Fence::Impl::take_back_unanswered() {
  std::vector<UnansweredAdmission> pending;
  {
    MutexLock lock(&unanswered_mu_);
    pending.swap(unanswered_);
  }
  int64_t taken_back = 0;
  size_t next = 0;
  for (; next < pending.size(); ++next) {
    bool withdrawn = false;
    const auto failure = write([&](LedgerTxn& txn) {
      withdrawn = rules::withdraw(txn, pending[next].intent, pending[next].token,
                                  "its admission was recorded, but the answer was lost with the ledger connection: "
                                  "nobody received its ticket",
                                  context(txn));
    });
    // The ledger cannot say yet: the rest would each wait out the same
    // failure (a connect timeout), so all are asked again next time.
    if (failure) break;
    if (!withdrawn) continue;  // not recorded after all, or since resolved
    ++taken_back;
    MutexLock lock(&counters_mu_);
    process_.aborted += 1;
  }
  MutexLock lock(&unanswered_mu_);
  unanswered_.insert(unanswered_.end(), pending.begin() + static_cast<std::ptrdiff_t>(next), pending.end());
  return taken_back;
}

int64_t Fence::Impl::fence_own_in_flight(const std::string& why, std::vector<std::string>* left_in_flight) {
  take_back_unanswered();  // nobody holds their tickets: taken back, not fenced for an operator
  int64_t fenced = 0;
  bool refused = false;
  for (const Ticket& ticket : fast_->held_tickets()) {
    // After one refused write the others would each wait out the same busy
    // timeout: a stopping process must not outlast its supervisor's patience.
    bool done = false;
    refused = refused ||
              write([&](LedgerTxn& txn) { done = rules::fence_held(txn, ticket, why, context(txn)); }).has_value();
    if (refused) {
      if (left_in_flight) left_in_flight->push_back(ticket.intent);
      continue;  // still held: the next call tries again
    }
    if (done) ++fenced;
    released(ticket);
  }
  return fenced;
}

bool Fence::Impl::fence_unknown(const Ticket& ticket, const std::string& why) {
  bool fenced = false;
  auto failure = write([&](LedgerTxn& txn) { fenced = rules::fence_held(txn, ticket, why, context(txn)); });
  if (!failure) released(ticket);
  return !failure && fenced;
}

// The public face: each synchronous verb is its asynchronous one waiting on
// the caller's thread.

PrepareOutcome Fence::prepare(const PrepareRequest& request) {
  return wait_for<PrepareOutcome>(
      [&](PrepareDone done) { impl_->prepare(request, Impl::Wait::caller, std::move(done)); });
}

void Fence::prepare_async(PrepareRequest request, PrepareDone done) {
  impl_->prepare(std::move(request), Impl::Wait::ledger, std::move(done));
}

CommitOutcome Fence::commit(const Ticket& ticket, const Json& result) {
  return wait_for<CommitOutcome>(
      [&](CommitDone done) { impl_->commit(ticket, result, Impl::Wait::caller, std::move(done)); });
}

void Fence::commit_async(const Ticket& ticket, Json result, CommitDone done) {
  impl_->commit(ticket, std::move(result), Impl::Wait::ledger, std::move(done));
}

AbortOutcome Fence::abort(const Ticket& ticket, const std::string& reason) {
  return wait_for<AbortOutcome>(
      [&](AbortDone done) { impl_->abort(ticket, reason, std::nullopt, Impl::Wait::caller, std::move(done)); });
}

AbortOutcome Fence::abort(const Ticket& ticket, const std::string& reason, const Json& unrecorded_result) {
  return wait_for<AbortOutcome>([&](AbortDone done) {
    impl_->abort(ticket, reason, unrecorded_result, Impl::Wait::caller, std::move(done));
  });
}

void Fence::abort_async(const Ticket& ticket, std::string reason, std::optional<Json> unrecorded_result,
                        AbortDone done) {
  impl_->abort(ticket, std::move(reason), std::move(unrecorded_result), Impl::Wait::ledger, std::move(done));
}

HeartbeatOutcome Fence::heartbeat(const Ticket& ticket) {
  return wait_for<HeartbeatOutcome>(
      [&](HeartbeatDone done) { impl_->heartbeat(ticket, Impl::Wait::caller, std::move(done)); });
}

void Fence::heartbeat_async(const Ticket& ticket, HeartbeatDone done) {
  impl_->heartbeat(ticket, Impl::Wait::ledger, std::move(done));
}

ClearOutcome Fence::clear(const std::string& intent, const std::string& operator_name, const std::string& reason) {
  return wait_for<ClearOutcome>([&](ClearDone done) {
    impl_->clear(intent, operator_name, reason, Impl::Wait::caller, std::move(done));
  });
}

void Fence::clear_async(std::string intent, std::string operator_name, std::string reason, ClearDone done) {
  impl_->clear(std::move(intent), std::move(operator_name), std::move(reason), Impl::Wait::ledger, std::move(done));
}

void Fence::withdraw_async(const Ticket& ticket, const std::string& why, std::function<void(bool)> done) {
  impl_->withdraw_async(ticket, why, std::move(done));
}

bool Fence::fence_unknown(const Ticket& ticket, const std::string& why) { return impl_->fence_unknown(ticket, why); }

std::variant<IntentStatus, Refusal> Fence::intent_status(const std::string& intent) {
  return impl_->intent_status(intent);
}

std::variant<DomainStatus, Refusal> Fence::domain_status(const std::string& domain) {
  return impl_->domain_status(domain);
}

std::variant<Stats, Refusal> Fence::stats() { return impl_->stats(); }

const Settings& Fence::settings() const { return impl_->settings_; }

std::string Fence::describe_ledger() const { return impl_->ledger_->describe(); }

LedgerMetrics Fence::ledger_metrics() const { return impl_->ledger_->metrics(); }

// What Maintenance and the servers reach beyond the public face.

void FenceInternal::stop_admitting(Fence& fence) { fence.impl_->admitting_.store(false); }

int64_t FenceInternal::sweep(Fence& fence) { return fence.impl_->sweep(); }

bool FenceInternal::evict_domain(Fence& fence, const std::string& domain) {
  return fence.impl_->evict_domain(domain);
}

int64_t FenceInternal::reap_dead_holders(Fence& fence) { return fence.impl_->reap_dead_holders(); }

int64_t FenceInternal::take_back_unanswered(Fence& fence) { return fence.impl_->take_back_unanswered(); }

int64_t FenceInternal::fence_own_in_flight(Fence& fence, const std::string& why,
                                           std::vector<std::string>* left_in_flight) {
  return fence.impl_->fence_own_in_flight(why, left_in_flight);
}

}  // namespace effectfence
