// The fence: exactly-once admission of side effects.
//
//   auto opened = Fence::open(Settings::from_environment());
//   Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
//   PrepareOutcome p = fence.prepare(request);
//   if (auto* a = std::get_if<Admitted>(&p)) { run the effect; fence.commit(a->ticket, result); }
//   else if (auto* r = std::get_if<Replayed>(&p)) { use r->cert.result; do NOT run it }
//   else { refused: do NOT run it; explain(std::get<Refusal>(p), Step::prepare) says why }
//
// All methods are thread-safe and never throw: failures of the ledger come
// back as Refusal{ledger_error|ledger_busy}, i.e. closed, never open.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/mutex.h"
#include "effectfence/ledger.h"
#include "effectfence/types.h"

namespace effectfence {

class FastPath;
class Signer;
class SealedAhead;
class LedgerTxn;
namespace rules { struct Context; struct Attempt; }

struct Settings {
  // A file path, "memory" for a ledger that lives as long as the Fence, or a
  // PostgreSQL URL (postgres://..., postgresql://..., or "postgres:" for the
  // PG* environment variables).
  std::string ledger_path = "memory";
  // The lease from 1 ms, the result lifetime from 0 (0: a sweep forgets
  // every finished intent), both up to ten years, or open refuses
  // (invalid_settings).
  static constexpr int64_t kMaxLifetimeMs = int64_t{10} * 365 * 86'400'000;  // ten years: now + it cannot overflow
  int64_t lease_ttl_ms = 60'000;          // EFFECTFENCE_LEASE_SECS
  int64_t result_ttl_ms = 86'400'000;     // EFFECTFENCE_RESULT_TTL_SECS
  // How often a long-running server (serve, wrap, the shared server) sweeps
  // after the sweep when it starts. The fence itself sweeps only when asked.
  int64_t sweep_interval_ms = 600'000;    // EFFECTFENCE_SWEEP_INTERVAL_SECS
  int64_t busy_timeout_ms = 10'000;       // how long to wait for a locked ledger
  // Whether opening records result_ttl_ms in the ledger (only ever raising
  // it), as every process that serves decisions must; a one-off operator
  // command (clear) that promises no replay to anyone leaves it alone.
  bool promises_result_ttl = true;
  // Set when ledger_path is the default: its directory is created (0700).
  bool create_parent_directories = false;
  // This process's wall clock in ms since the epoch (the fast path's cache
  // ages by it); tests inject their own. Leases never trust it: they are
  // decided by the ledger's clock, the database server's now() for
  // PostgreSQL and the system clock of the host for an SQLite file, so a
  // replica whose clock is off cannot take over a live lease.
  std::function<int64_t()> clock_ms;
  // Replaces the ledger's clock for lease decisions: tests that move time
  // past a lease inject it.
  std::function<int64_t()> ledger_clock_ms;
  // Who this fence records as the holder of what it admits, and how it
  // judges other holders (gone: fenced unknown; running here: its lease
  // running out ends nothing). Unset: this process, judged by what this
  // host's process table says (ledger/holder.h). A simulator that plays
  // many processes on several hosts inside one process injects its own.
  std::optional<Holder> holder;
  std::function<bool(const Holder&)> holder_is_dead;
  std::function<bool(const Holder&)> holder_is_alive;
  // Signs every certificate this fence records (core/signing.h:
  // Signer::from_file reads a key `effectfence keygen` wrote), in the same
  // transaction. Unset: certificates are recorded unsigned.
  std::shared_ptr<const Signer> signer;

  // Defaults overridden by EFFECTFENCE_LEDGER, EFFECTFENCE_LEASE_SECS,
  // EFFECTFENCE_RESULT_TTL_SECS, EFFECTFENCE_SWEEP_INTERVAL_SECS. An unset
  // ledger resolves to default_ledger_path(name).
  static Settings from_environment(const std::string& default_name = "server");
  // $XDG_STATE_HOME/effectfence/<name>.sqlite, else ~/.local/state/effectfence/<name>.sqlite
  static std::string default_ledger_path(const std::string& name);
  int64_t now_ms() const;
};

class Fence {
 public:
  static std::variant<std::unique_ptr<Fence>, OpenError> open(Settings settings);
  ~Fence();
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;

  // Admits at most one attempt per intent across every process on the ledger.
  // Returns Admitted (run the effect, then commit), Replayed (it already ran:
  // use the certificate) or a Refusal (do not run it).
  PrepareOutcome prepare(const PrepareRequest& request);
  // Records the effect's result under the ticket's token and returns its
  // certificate. Re-validates the read-set: if a domain moved, the intent is
  // fenced as failed (the effect ran on outdated state) and stale_read_set
  // is returned. lease_lost iff the token no longer holds the intent.
  CommitOutcome commit(const Ticket& ticket, const Json& result);

  // prepare() and commit() without blocking the caller, for servers that
  // answer many calls at once: done receives the outcome exactly once,
  // either before the call returns (refusals and the in-process fast path's
  // decisions) or later on a ledger thread, once the decision is durable.
  // done must not block for long: it holds up the answers behind it.
  using PrepareDone = std::function<void(PrepareOutcome)>;
  using CommitDone = std::function<void(CommitOutcome)>;
  void prepare_async(PrepareRequest request, PrepareDone done);
  void commit_async(const Ticket& ticket, Json result, CommitDone done);
  // Fences the intent as failed until cleared.
  AbortOutcome abort(const Ticket& ticket, const std::string& reason);
  // The same for an effect that ran but whose result could not be recorded
  // (it has no canonical form): the result is kept in the audit log as the
  // JSON text it came as (the aborted event's detail.result_json).
  AbortOutcome abort(const Ticket& ticket, const std::string& reason, const Json& unrecorded_result);
  // Takes back an admission whose ticket was never handed to anyone (its
  // call was cancelled before the answer went out): nothing can have run,
  // so the intent is aborted and cleared in one transaction, both audited,
  // and the next prepare is fresh. Does nothing unless the ticket still
  // holds the intent in flight. Never blocks; done (if any) gets whether it
  // was taken back, on a ledger thread.
  void withdraw_async(const Ticket& ticket, const std::string& why, std::function<void(bool)> done = nullptr);
  // Extends the lease by lease_ttl from now.
  HeartbeatOutcome heartbeat(const Ticket& ticket);
  // Operator: failed/unknown -> cleared, audited; the next prepare is fresh.
  ClearOutcome clear(const std::string& intent, const std::string& operator_name,
                     const std::string& reason);

  // Read-only; never creates rows.
  std::variant<IntentStatus, Refusal> intent_status(const std::string& intent);
  std::variant<DomainStatus, Refusal> domain_status(const std::string& domain);
  std::variant<Stats, Refusal> stats();

  // Drops finished intents older than result_ttl (certificates stay).
  // Returns how many, or -1 on a ledger error.
  int64_t sweep();
  // Forgets a domain row that no intent refers to. Returns true iff removed.
  bool evict_domain(const std::string& domain);
  // Moves in-flight intents whose holder process on this host is gone to
  // unknown. Returns how many.
  int64_t reap_dead_holders();
  // A prepare refused because the ledger connection was lost while its
  // decision was committing (PostgreSQL) may have been admitted all the
  // same, with nobody holding the ticket. Takes each such admission back
  // (aborted and cleared, audited) once the ledger answers, so the next
  // prepare is fresh instead of refused in_flight until this process exits
  // and then fenced unknown. Returns how many; those the ledger could not
  // be asked about are tried again on the next call. serve and wrap call it
  // every few seconds, and fence_own_in_flight calls it first.
  int64_t take_back_unanswered();
  // Moves every intent this process admitted and has not seen resolved to
  // unknown (used on shutdown: nobody is left to commit through us). Returns
  // how many. Intents the ledger would not let it fence (locked past the busy
  // timeout, failing) stay held, so a later call tries them again, and are
  // listed in left_in_flight if given.
  int64_t fence_own_in_flight(const std::string& why, std::vector<std::string>* left_in_flight = nullptr);
  // From now on a prepare that would admit is refused (ledger_error, nothing
  // recorded); replays and other refusals go on. For a process on its way
  // out: whatever it admitted now, nobody could commit through it, and it
  // would have to fence it for an operator.
  void stop_admitting() { admitting_.store(false); }
  // Moves the ticket's intent to unknown iff the ticket still holds it in
  // flight: the effect may or may not have happened (a cancelled call, an
  // unreadable answer). Returns true iff it did. The holder can still
  // resolve it with commit or abort.
  bool fence_unknown(const Ticket& ticket, const std::string& why);

  const Settings& settings() const { return settings_; }
  // A short description of the ledger for logs ("sqlite:/path (schema 1)").
  std::string describe_ledger() const;
  // How the ledger has batched this process's decisions so far.
  LedgerMetrics ledger_metrics() const;

 private:
  struct PendingPrepare;
  struct PendingCommit;

  Fence(Settings settings, std::unique_ptr<Ledger> ledger);
  // Records this process's result TTL in the ledger if it is longer than
  // what is there, so a sweep by anyone (an operator's by hand too) keeps
  // the results this process promises, before its first sweep of its own.
  void promise_result_ttl();
  // The rules' context for one transaction; its time is lease_now(txn).
  rules::Context context(LedgerTxn& txn) const;
  int64_t lease_now(LedgerTxn& txn) const;
  void tally(const PrepareOutcome& outcome, bool decided_here);
  // The halves of prepare around the ledger: begin_prepare returns the
  // outcome when it needs no ledger, else what the ledger must decide.
  std::variant<PrepareOutcome, std::shared_ptr<PendingPrepare>> begin_prepare(PrepareRequest request);
  PrepareOutcome finish_prepare(PendingPrepare& pending, const std::optional<Refusal>& failure);
  AbortOutcome abort_with(const Ticket& ticket, const std::string& reason, const Json* unrecorded_result);
  // recorded: this call recorded the outcome (a retry is not counted again).
  // epoch_before: the ledger's external_changes() before the commit was asked for.
  CommitOutcome finish_commit(const Ticket& ticket, CommitOutcome outcome, bool recorded, uint64_t epoch_before);
  // The ticket no longer holds its intent here (aborted, refused, lost).
  void released(const Ticket& ticket);
  // ledger_->write, adding the fast path's pending counters to the same transaction.
  std::optional<Refusal> write(const std::function<void(LedgerTxn&)>& fn);
  void write_async(std::function<void(LedgerTxn&)> fn, Ledger::WriteDone done);
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

}  // namespace effectfence
