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

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "effectfence/ledger.h"
#include "effectfence/types.h"

namespace effectfence {

class Signer;

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
  // How often Maintenance (serve, wrap, the shared server) sweeps after the
  // sweep when it starts. The fence itself never sweeps.
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

  // Each verb comes twice: a synchronous call, and the same call without
  // blocking the caller, for servers that answer many calls at once (one
  // path: the synchronous call is the asynchronous one waiting on the
  // caller's thread). done receives the outcome exactly once, either before
  // the call returns (refusals and the in-process fast path's decisions) or
  // later on a ledger thread, once the decision is durable. done must not
  // block for long: it holds up the answers behind it.
  using PrepareDone = std::function<void(PrepareOutcome)>;
  using CommitDone = std::function<void(CommitOutcome)>;
  using AbortDone = std::function<void(AbortOutcome)>;
  using HeartbeatDone = std::function<void(HeartbeatOutcome)>;
  using ClearDone = std::function<void(ClearOutcome)>;

  // Admits at most one attempt per intent across every process on the ledger.
  // Returns Admitted (run the effect, then commit), Replayed (it already ran:
  // use the certificate) or a Refusal (do not run it).
  PrepareOutcome prepare(const PrepareRequest& request);
  void prepare_async(PrepareRequest request, PrepareDone done);
  // Records the effect's result under the ticket's token and returns its
  // certificate. Re-validates the read-set: if a domain moved, the intent is
  // fenced as failed (the effect ran on outdated state) and stale_read_set
  // is returned. lease_lost iff the token no longer holds the intent.
  CommitOutcome commit(const Ticket& ticket, const Json& result);
  void commit_async(const Ticket& ticket, Json result, CommitDone done);
  // Fences the intent as failed until cleared.
  AbortOutcome abort(const Ticket& ticket, const std::string& reason);
  // The same for an effect that ran but whose result could not be recorded
  // (it has no canonical form): the result is kept in the audit log as the
  // JSON text it came as (the aborted event's detail.result_json).
  AbortOutcome abort(const Ticket& ticket, const std::string& reason, const Json& unrecorded_result);
  // unrecorded_result: as above, or nullopt for the plain abort.
  void abort_async(const Ticket& ticket, std::string reason, std::optional<Json> unrecorded_result, AbortDone done);
  // Extends the lease by lease_ttl from now.
  HeartbeatOutcome heartbeat(const Ticket& ticket);
  void heartbeat_async(const Ticket& ticket, HeartbeatDone done);
  // Operator: failed/unknown -> cleared, audited; the next prepare is fresh.
  ClearOutcome clear(const std::string& intent, const std::string& operator_name, const std::string& reason);
  void clear_async(std::string intent, std::string operator_name, std::string reason, ClearDone done);

  // For a server whose call ended without its answer reaching the client.
  // Takes back an admission whose ticket was never handed to anyone (its
  // call was cancelled before the answer went out): nothing can have run,
  // so the intent is aborted and cleared in one transaction, both audited,
  // and the next prepare is fresh. Does nothing unless the ticket still
  // holds the intent in flight. Never blocks; done (if any) gets whether it
  // was taken back, on a ledger thread.
  void withdraw_async(const Ticket& ticket, const std::string& why, std::function<void(bool)> done = nullptr);
  // Moves the ticket's intent to unknown iff the ticket still holds it in
  // flight: the effect may or may not have happened (a cancelled call, an
  // unreadable answer). Returns true iff it did. The holder can still
  // resolve it with commit or abort.
  bool fence_unknown(const Ticket& ticket, const std::string& why);

  // Read-only; never creates rows.
  std::variant<IntentStatus, Refusal> intent_status(const std::string& intent);
  std::variant<DomainStatus, Refusal> domain_status(const std::string& domain);
  std::variant<Stats, Refusal> stats();

  const Settings& settings() const;
  // A short description of the ledger for logs ("sqlite:/path (schema 1)").
  std::string describe_ledger() const;
  // How the ledger has batched this process's decisions so far.
  LedgerMetrics ledger_metrics() const;

  // What a process that serves decisions must also do (sweep, reap dead
  // holders, take back unanswered admissions, fence its own on the way
  // out) is Maintenance's (effectfence/maintenance.h).

 private:
  struct Impl;
  friend class FenceInternal;  // src/fence/fence_internal.h: Maintenance's and the servers' way in

  explicit Fence(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace effectfence
