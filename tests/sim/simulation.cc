#include "sim/simulation.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "effectfence/fence.h"
#include "fence/fence_internal.h"
#include "sim/checker.h"
#include "sim/random.h"
#include "support/power_loss_vfs.h"

namespace effectfence::sim {

const char* plant_name(Plant plant) {
  switch (plant) {
    case Plant::none: return "none";
    case Plant::ignore_refusal: return "ignore-refusal";
    case Plant::lost_wal: return "lost-wal";
    case Plant::blind_commit: return "blind-commit";
  }
  return "?";
}

bool plant_from_name(const std::string& name, Plant* plant) {
  for (Plant p : {Plant::none, Plant::ignore_refusal, Plant::lost_wal, Plant::blind_commit}) {
    if (name == plant_name(p)) {
      *plant = p;
      return true;
    }
  }
  return false;
}

namespace {

namespace fs = std::filesystem;
using testing::PowerLossVfs;

constexpr int64_t kLeaseMs = 1000;
constexpr int64_t kLeaseMarginMs = 300;  // more than any process's clock is off
constexpr int64_t kStartMs = 1'800'000'000'000;  // 2027-01-15: any fixed instant

const char* kHosts[] = {"sim-host-a", "sim-host-b/pidns:4026532000"};

// A connection of the world's own to the ledger: the operator's sqlite3
// (or psql), and the eyes the checker reads rows with.
class Sql {
 public:
  virtual ~Sql() = default;
  // Returns "" on success, else the database's message.
  virtual std::string exec(const std::string& sql) = 0;
  // The first row of sql, whose one parameter (?1) is arg, as text
  // (NULL as ""); nullopt when there is none.
  virtual std::optional<std::vector<std::string>> first_row(const std::string& sql, const std::string& arg) = 0;

  RowView row(const std::string& intent) {
    RowView r;
    auto v = first_row("SELECT state, token, coalesce(cert_hash, ''), coalesce(reason, ''), holder_host, generation, "
                       "lease_expires_at, updated_at FROM intents WHERE intent = ?1",
                       intent);
    if (!v || v->size() != 8) return r;
    r.exists = true;
    r.state = (*v)[0];
    r.token = (*v)[1];
    r.cert_hash = (*v)[2];
    r.reason = (*v)[3];
    r.holder_host = (*v)[4];
    r.generation = std::stoll((*v)[5]);
    r.lease_expires_at = std::stoll((*v)[6]);
    r.updated_at = std::stoll((*v)[7]);
    return r;
  }
  int64_t integer(const std::string& sql, const std::string& arg) {
    auto v = first_row(sql, arg);
    return v && !v->empty() && !(*v)[0].empty() ? std::stoll((*v)[0]) : -1;
  }
};

class SqliteSql final : public Sql {
 public:
  explicit SqliteSql(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) db_ = nullptr;
    if (db_) sqlite3_busy_timeout(db_, 1);
  }
  ~SqliteSql() override { sqlite3_close(db_); }
  SqliteSql(const SqliteSql&) = delete;
  SqliteSql& operator=(const SqliteSql&) = delete;

  std::string exec(const std::string& sql) override {
    if (!db_) return "not open";
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) == SQLITE_OK) return "";
    std::string message = error ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    if (message.empty()) message = "error";
    return message;
  }
  std::optional<std::vector<std::string>> first_row(const std::string& sql, const std::string& arg) override {
    sqlite3_stmt* q = nullptr;
    if (!db_ || sqlite3_prepare_v2(db_, sql.c_str(), -1, &q, nullptr) != SQLITE_OK) return std::nullopt;
    sqlite3_bind_text(q, 1, arg.c_str(), static_cast<int>(arg.size()), SQLITE_TRANSIENT);
    std::optional<std::vector<std::string>> out;
    if (sqlite3_step(q) == SQLITE_ROW) {
      out.emplace();
      for (int i = 0; i < sqlite3_column_count(q); ++i) {
        const unsigned char* t = sqlite3_column_text(q, i);
        out->push_back(t ? reinterpret_cast<const char*>(t) : "");
      }
    }
    sqlite3_finalize(q);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

class PgSql final : public Sql {
 public:
  explicit PgSql(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);  // "drop cascades to ..." is no news
  }
  ~PgSql() override { PQfinish(conn_); }
  PgSql(const PgSql&) = delete;
  PgSql& operator=(const PgSql&) = delete;

  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  std::string exec(const std::string& sql) override {
    PGresult* r = PQexec(conn_, sql.c_str());
    const ExecStatusType status = PQresultStatus(r);
    std::string message = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK ? "" : PQerrorMessage(conn_);
    PQclear(r);
    return message.substr(0, message.find('\n'));  // the error, without its CONTEXT lines
  }
  std::optional<std::vector<std::string>> first_row(const std::string& sql, const std::string& arg) override {
    std::string text = sql;
    for (size_t at = text.find("?1"); at != std::string::npos; at = text.find("?1", at)) text.replace(at, 2, "$1");
    const char* params[] = {arg.c_str()};
    PGresult* r = PQexecParams(conn_, text.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
    std::optional<std::vector<std::string>> out;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
      out.emplace();
      for (int i = 0; i < PQnfields(r); ++i) out->push_back(PQgetvalue(r, 0, i));
    }
    PQclear(r);
    return out;
  }

 private:
  PGconn* conn_;
};

struct Process {
  int host = 0;
  int64_t pid = 0;
  int64_t skew = 0;  // its own clock against the ledger's (the fast path's cache ages by it)
  std::unique_ptr<Fence> fence;
  int down_until = 0;  // the step it may be started again at
};

enum class Phase { idle, ready, holding, ran };

struct Agent {
  int slot = 0;  // its process
  Phase phase = Phase::idle;
  PrepareRequest request;
  Ticket ticket;
  int attempt = -1;
};

class World {
 public:
  explicit World(const Config& config) : config_(config), random_(config.seed), checker_(0) {
    processes_.resize(static_cast<size_t>(random_.between(1, 4)));
    // Drawn whether or not overridden: a shorter replay of a seed is a
    // prefix of its history, so shrinking by steps stays on that history.
    const int64_t agents = random_.between(2, 6);
    agents_.resize(static_cast<size_t>(config.agents > 0 ? config.agents : agents));
    intents_ = static_cast<int>(random_.between(1, 5));
    domains_ = static_cast<int>(random_.between(1, 3));
    const int64_t steps = random_.between(30, 60);
    steps_ = config.steps > 0 ? config.steps : static_cast<int>(steps);
    result_ttl_ms_ = random_.between(2, 6) * 1000;
    checker_ = Checker(result_ttl_ms_);
    for (size_t i = 0; i < processes_.size(); ++i) {
      processes_[i].host = i == 0 ? 0 : static_cast<int>(random_.between(0, 1));
      processes_[i].skew = random_.between(-200, 200);
    }
    for (size_t i = 0; i < agents_.size(); ++i) agents_[i].slot = static_cast<int>(i % processes_.size());
    fs::remove_all(config.work_dir);
    fs::create_directories(dir());
    if (pg()) {
      // A schema of its own per seed, in the database the URL names.
      schema_ = "sim_" + std::to_string(getpid()) + "_" + std::to_string(config.seed);
      admin_ = std::make_unique<PgSql>(config.postgres_url);
      admin_->exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      if (const std::string error = admin_->exec("CREATE SCHEMA " + schema_); !error.empty()) {
        checker_.violation("cannot create schema " + schema_ + ": " + error);
      }
      ledger_url_ = config.postgres_url + (config.postgres_url.find('?') == std::string::npos ? "?" : "&") +
                    "options=-csearch_path%3D" + schema_;
    } else if (!config.template_ledger.empty()) {
      fs::copy_file(config.template_ledger, ledger_path());
    }
    vfs_.set_clock([this] { return now_.load(); });
    vfs_.before_sync([this](const std::string&) {
      if (armed_syncs_ > 0 && --armed_syncs_ == 0) {
        fs::create_directories(next_dir());
        vfs_.crash_copy(dir(), next_dir());
        crashed_ = true;
      }
    });
  }

  ~World() {
    for (Process& p : processes_) p.fence.reset();
    locker_.reset();
    sql_.reset();
    vfs_.before_sync(nullptr);
    if (admin_) admin_->exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
    std::error_code ignored;
    fs::remove_all(config_.work_dir, ignored);
  }

  RunResult run() {
    result_.steps = steps_;
    result_.agents = static_cast<int>(agents_.size());
    log("seed " + std::to_string(config_.seed) + ": " + std::to_string(processes_.size()) + " processes, " +
        std::to_string(agents_.size()) + " agents, " + std::to_string(intents_) + " intents on " +
        std::to_string(domains_) + " domains, " + std::to_string(steps_) + " steps, lease " +
        std::to_string(kLeaseMs) + " ms, result TTL " + std::to_string(result_ttl_ms_) + " ms, plant " +
        plant_name(config_.plant));
    start(0);  // the ledger exists before anyone reads it with SQL
    sql_ = make_sql();
    if (pg()) {
      // SQL's own 'now' (clears are dated by it) is the simulated clock, as
      // the VFS makes it for SQLite: the ledger's clock functions, in this
      // seed's schema only, read it from a table the world keeps current.
      const std::string error = sql_->exec(
          "CREATE TABLE sim_clock(ms bigint NOT NULL); INSERT INTO sim_clock VALUES (" + std::to_string(now_.load()) +
          "); CREATE OR REPLACE FUNCTION effectfence_now_ms() RETURNS bigint LANGUAGE sql STABLE AS "
          "$$ SELECT ms FROM sim_clock $$; CREATE OR REPLACE FUNCTION effectfence_statement_ms() RETURNS bigint "
          "LANGUAGE sql STABLE AS $$ SELECT ms FROM sim_clock $$");
      if (!error.empty()) checker_.violation("cannot put the ledger on the simulated clock: " + error);
    }
    for (step_ = 1; step_ <= steps_; ++step_) {
      end_faults_due();
      now_ += random_.between(0, 300);
      sync_sql_clock();
      one_step();
      if (crashed_) power_loss(/*mid_operation=*/true);
    }
    finish();
    result_.violations = checker_.violations();
    return std::move(result_);
  }

 private:
  std::string dir() const { return config_.work_dir + "/g" + std::to_string(generation_); }
  std::string next_dir() const { return config_.work_dir + "/g" + std::to_string(generation_ + 1); }
  std::string ledger_path() const { return pg() ? ledger_url_ : dir() + "/ledger.sqlite"; }
  bool pg() const { return !config_.postgres_url.empty(); }
  std::unique_ptr<Sql> make_sql() const {
    if (pg()) return std::make_unique<PgSql>(ledger_url_);
    return std::make_unique<SqliteSql>(ledger_path());
  }
  void sync_sql_clock() {
    if (pg() && sql_) sql_->exec("UPDATE sim_clock SET ms = " + std::to_string(now_.load()));
  }
  std::string boot() const { return "boot-" + std::to_string(boot_); }
  std::string intent_name(int k) const { return "charge:" + std::to_string(k); }
  std::string domain_of(int k) const { return "order:" + std::to_string(k % domains_); }

  void log(const std::string& line) {
    result_.history.push_back("[" + std::to_string(step_) + "] t=" + std::to_string(now_ - kStartMs) + " " + line);
  }
  bool faults_active() const { return locker_ != nullptr || failing_until_ >= step_; }

  Holder holder_of(const Process& p) const {
    return Holder{kHosts[p.host], boot(), p.pid, p.pid};
  }
  // What a process on host sees of holder: only its own host's processes.
  bool seen_dead(int host, const Holder& h) const {
    return h.host == kHosts[host] && (h.boot != boot() || !alive_pids_.count(h.pid));
  }
  bool seen_alive(int host, const Holder& h) const {
    return h.host == kHosts[host] && h.boot == boot() && alive_pids_.count(h.pid);
  }

  // Starts process slot afresh (a new pid); false if the ledger would not open.
  bool start(int slot) {
    Process& p = processes_[static_cast<size_t>(slot)];
    p.pid = next_pid_++;
    Settings s;
    s.ledger_path = ledger_path();
    s.lease_ttl_ms = kLeaseMs;
    s.result_ttl_ms = result_ttl_ms_;
    s.busy_timeout_ms = 1;
    const int64_t skew = p.skew;
    const int host = p.host;
    s.clock_ms = [this, skew] { return now_.load() + skew; };
    s.ledger_clock_ms = [this] { return now_.load(); };
    s.holder = holder_of(p);
    s.holder_is_dead = [this, host](const Holder& h) { return seen_dead(host, h); };
    s.holder_is_alive = [this, host](const Holder& h) { return seen_alive(host, h); };
    alive_pids_.insert(p.pid);
    auto opened = Fence::open(std::move(s));
    ++result_.operations;
    if (auto* error = std::get_if<OpenError>(&opened)) {
      alive_pids_.erase(p.pid);
      log("process " + std::to_string(slot) + " could not open the ledger: " + error->message);
      if (!faults_active() && !crashed_) checker_.violation("the ledger would not open with no fault injected: " + error->message);
      return false;
    }
    p.fence = std::move(std::get<std::unique_ptr<Fence>>(opened));
    log("process " + std::to_string(slot) + " started as pid " + std::to_string(p.pid) + " on " + kHosts[p.host]);
    return true;
  }

  void kill(int slot, bool gracefully) {
    Process& p = processes_[static_cast<size_t>(slot)];
    if (!p.fence) return;
    if (gracefully) {
      const int64_t fenced = FenceInternal::fence_own_in_flight(*p.fence, "the simulated process is stopping");
      ++result_.operations;
      log("process " + std::to_string(slot) + " (pid " + std::to_string(p.pid) + ") stops, fencing " +
          std::to_string(fenced) + " of its intents");
    } else {
      log("process " + std::to_string(slot) + " (pid " + std::to_string(p.pid) + ") is killed");
    }
    alive_pids_.erase(p.pid);
    p.fence.reset();
    p.down_until = step_ + static_cast<int>(random_.between(1, 6));
    for (Agent& a : agents_) {
      if (a.slot == slot) a.phase = Phase::idle;
    }
  }

  void one_step() {
    const int64_t pick = random_.between(0, 99);
    if (pick < 62) return agent_step(static_cast<int>(random_.between(0, static_cast<int64_t>(agents_.size()) - 1)));
    if (pick < 67) return kill(random_slot(), /*gracefully=*/false);
    if (pick < 69) return kill(random_slot(), /*gracefully=*/true);
    if (pick < 72) {
      // PostgreSQL keeps its own disk: no power loss, lock or failing sync is simulated there.
      if (crashes_this_run_ >= 3 || pg()) return;
      if (random_.chance(50)) return power_loss(/*mid_operation=*/false);
      armed_syncs_ = static_cast<int>(random_.between(1, 6));
      log("power will be lost at the " + std::to_string(armed_syncs_.load()) + "th sync from now");
      return;
    }
    if (pick < 76) return lock_ledger();
    if (pick < 79) return fail_syncs();
    if (pick < 86) return operator_clear(static_cast<int>(random_.between(0, intents_ - 1)));
    if (pick < 90) return sweep(random_slot());
    if (pick < 95) return clock_step();
    reap(random_slot());
  }

  int random_slot() { return static_cast<int>(random_.between(0, static_cast<int64_t>(processes_.size()) - 1)); }

  Fence* running(int slot) {
    Process& p = processes_[static_cast<size_t>(slot)];
    if (!p.fence && p.down_until <= step_) start(slot);
    return p.fence.get();
  }

  // --- agents -------------------------------------------------------------

  void agent_step(int id) {
    Agent& a = agents_[static_cast<size_t>(id)];
    Fence* fence = running(a.slot);
    if (!fence || crashed_) return;
    switch (a.phase) {
      case Phase::idle: return choose(id, a, *fence);
      case Phase::ready: return prepare(id, a, *fence);
      case Phase::holding: {
        const int64_t r = random_.between(0, 99);
        if (r < 65) {
          // The client's side of the lease: run only well inside it, by its
          // own clock (off the ledger's by at most 200 ms), else renew first.
          const int64_t own_now = now_ + processes_[static_cast<size_t>(a.slot)].skew;
          if (own_now + kLeaseMarginMs >= a.ticket.lease_expires_at_ms) return heartbeat(id, a, *fence);
          return execute(id, a);
        }
        if (r < 75) return abort(id, a, *fence);
        if (r < 85) return heartbeat(id, a, *fence);
        log("agent " + std::to_string(id) + " stalls");
        return;
      }
      case Phase::ran: {
        const int64_t r = random_.between(0, 99);
        if (r < 70) return commit(id, a, *fence);
        if (r < 80) return heartbeat(id, a, *fence);
        if (r < 85) return abort(id, a, *fence);
        log("agent " + std::to_string(id) + " stalls after running " + a.ticket.intent);
        return;
      }
    }
  }

  void choose(int id, Agent& a, Fence& fence) {
    const int k = static_cast<int>(random_.between(0, intents_ - 1));
    PrepareRequest req;
    req.intent = intent_name(k);
    req.domain = domain_of(k);
    req.tool = "charge";
    req.args = Json{{"order", k}, {"cents", 100 * (k + 1)}};
    if (random_.chance(8)) req.args["cents"] = 1;  // the same intent for another action
    req.agent = "agent-" + std::to_string(id);
    a.request = req;
    a.phase = Phase::ready;
    if (!random_.chance(35)) return prepare(id, a, fence);
    // Decide on what a domain looked like: prepare later, with a read-set.
    const std::string read = "order:" + std::to_string(random_.between(0, domains_ - 1));
    auto status = fence.domain_status(read);
    ++result_.operations;
    if (crashed_) return;
    if (const auto* d = std::get_if<DomainStatus>(&status)) {
      a.request.read_set.push_back(ReadSetEntry{read, d->seq});
      log("agent " + std::to_string(id) + " reads " + read + " at seq " + std::to_string(d->seq) + " to decide " +
          req.intent);
    } else {
      a.phase = Phase::idle;
    }
  }

  void prepare(int id, Agent& a, Fence& fence) {
    const PrepareRequest& req = a.request;
    const RowView before = sql_->row(req.intent);
    std::string moved;
    for (const ReadSetEntry& e : req.read_set) {
      const int64_t seq = sql_->integer("SELECT coalesce((SELECT seq FROM domains WHERE domain = ?1), 0)", e.domain);
      if (seq != e.seq) moved += e.domain + " read at " + std::to_string(e.seq) + " is at " + std::to_string(seq) + "; ";
    }
    const PrepareOutcome outcome = fence.prepare(req);
    ++result_.operations;
    a.phase = Phase::idle;
    const std::string who = "agent " + std::to_string(id) + " prepare " + req.intent +
                            (req.args["cents"] == 1 ? " (other args)" : "") +
                            (req.read_set.empty() ? "" : " (read-set)") + " -> ";
    if (crashed_) return log(who + "answer lost in the power loss");
    checker_.done_kept(req.intent, before, sql_->row(req.intent), "prepare");
    if (const auto* admitted = std::get_if<Admitted>(&outcome)) {
      if (!moved.empty()) checker_.admitted_on_moved_read_set(req.intent, moved);
      const AttemptRecord& r =
          checker_.admitted(req.intent, admitted->ticket, kHosts[processes_[static_cast<size_t>(a.slot)].host], now_);
      a.ticket = admitted->ticket;
      a.attempt = r.id;
      a.phase = Phase::holding;
      return log(who + "admitted as attempt #" + std::to_string(r.id) + " generation " +
                 std::to_string(a.ticket.generation) + " lease to " + std::to_string(a.ticket.lease_expires_at_ms - kStartMs));
    }
    if (const auto* replayed = std::get_if<Replayed>(&outcome)) {
      checker_.replayed(req, replayed->cert);
      return log(who + "replayed " + replayed->cert.hash.substr(0, 12) + " " + replayed->cert.result.dump());
    }
    const Refusal& refusal = std::get<Refusal>(outcome);
    log(who + "refused " + reason_name(refusal.reason));
    if (config_.plant == Plant::ignore_refusal &&
        (refusal.reason == Reason::in_flight || refusal.reason == Reason::prior_failure)) {
      const AttemptRecord& r =
          checker_.unadmitted_run(req.intent, kHosts[processes_[static_cast<size_t>(a.slot)].host], now_);
      checker_.executed(r.id, now_);
      ++result_.executions;
      log("agent " + std::to_string(id) + " ignores the refusal and runs " + req.intent + " (planted bug)");
    }
  }

  void execute(int id, Agent& a) {
    checker_.executed(a.attempt, now_);
    ++result_.executions;
    a.phase = Phase::ran;
    log("agent " + std::to_string(id) + " runs the effect of " + a.ticket.intent + " (attempt #" +
        std::to_string(a.attempt) + ")");
  }

  void commit(int id, Agent& a, Fence& fence) {
    const Json result = Json{{"charged_by_attempt", a.attempt}};
    checker_.commit_asked(a.attempt, result.dump());
    const RowView before = sql_->row(a.ticket.intent);
    const CommitOutcome outcome = fence.commit(config_.plant == Plant::blind_commit ? blind(a.ticket) : a.ticket, result);
    ++result_.operations;
    const std::string who = "agent " + std::to_string(id) + " commit " + a.ticket.intent + " #" +
                            std::to_string(a.attempt) + " -> ";
    if (crashed_) return log(who + "answer lost in the power loss");
    const RowView after = sql_->row(a.ticket.intent);
    const auto* cert = std::get_if<Certificate>(&outcome);
    checker_.zombie_changed_nothing(a.ticket.intent, a.ticket.token, cert != nullptr, before, after, "commit");
    checker_.done_kept(a.ticket.intent, before, after, "commit");
    if (cert) {
      checker_.commit_answered(a.attempt, *cert, now_);
      a.phase = Phase::idle;
      return log(who + "certificate " + cert->hash.substr(0, 12));
    }
    const Refusal& refusal = std::get<Refusal>(outcome);
    log(who + "refused " + reason_name(refusal.reason));
    if (!is_ledger_trouble(outcome)) a.phase = Phase::idle;  // trouble: the same commit is retried later
  }

  // The planted blind commit: the ticket as the row holds it now, whoever
  // that is, so the fence's token compare (row_held_by) passes whatever
  // the agent was admitted as; the state checks stay, as in the model's
  // -DBLIND_COMMIT (model/fence.pml). No row: the ticket as it was.
  Ticket blind(const Ticket& ticket) {
    Ticket current = ticket;
    auto v = sql_->first_row("SELECT token, generation, seq, domain FROM intents WHERE intent = ?1", ticket.intent);
    if (!v || v->size() != 4) return current;
    current.token = (*v)[0];
    current.generation = std::stoll((*v)[1]);
    current.seq = std::stoll((*v)[2]);
    current.domain = (*v)[3];
    if (current.token != ticket.token) {
      log("agent's commit of " + ticket.intent + " goes blind: sent with the token of generation " +
          std::to_string(current.generation) + " (planted bug)");
    }
    return current;
  }

  void abort(int id, Agent& a, Fence& fence) {
    const RowView before = sql_->row(a.ticket.intent);
    const AbortOutcome outcome = fence.abort(a.ticket, "the simulated effect failed");
    ++result_.operations;
    const std::string who = "agent " + std::to_string(id) + " abort " + a.ticket.intent + " #" +
                            std::to_string(a.attempt) + " -> ";
    if (crashed_) return log(who + "answer lost in the power loss");
    const RowView after = sql_->row(a.ticket.intent);
    const bool aborted = std::holds_alternative<Aborted>(outcome);
    checker_.zombie_changed_nothing(a.ticket.intent, a.ticket.token, aborted, before, after, "abort");
    checker_.done_kept(a.ticket.intent, before, after, "abort");
    if (aborted) checker_.abort_answered(a.attempt);
    log(who + (aborted ? "aborted" : std::string("refused ") + reason_name(std::get<Refusal>(outcome).reason)));
    if (!is_ledger_trouble(outcome)) a.phase = Phase::idle;
  }

  void heartbeat(int id, Agent& a, Fence& fence) {
    const RowView before = sql_->row(a.ticket.intent);
    const HeartbeatOutcome outcome = fence.heartbeat(a.ticket);
    ++result_.operations;
    const std::string who = "agent " + std::to_string(id) + " heartbeat " + a.ticket.intent + " #" +
                            std::to_string(a.attempt) + " -> ";
    if (crashed_) return log(who + "answer lost in the power loss");
    const RowView after = sql_->row(a.ticket.intent);
    const auto* extended = std::get_if<Extended>(&outcome);
    checker_.zombie_changed_nothing(a.ticket.intent, a.ticket.token, extended != nullptr, before, after, "heartbeat");
    checker_.done_kept(a.ticket.intent, before, after, "heartbeat");
    if (extended) {
      a.ticket.lease_expires_at_ms = extended->lease_expires_at_ms;
      checker_.extended(a.attempt, extended->lease_expires_at_ms);
      return log(who + "lease to " + std::to_string(extended->lease_expires_at_ms - kStartMs));
    }
    log(who + "refused " + reason_name(std::get<Refusal>(outcome).reason));
    // A holder that lost its lease before running gives up; one that ran
    // still reports its result (the fence keeps a refused one in the log).
    if (!is_ledger_trouble(outcome) && a.phase == Phase::holding) a.phase = Phase::idle;
  }

  // --- the world around them ----------------------------------------------

  void operator_clear(int k) {
    const std::string intent = intent_name(k);
    const RowView before = sql_->row(intent);
    const std::string count_sql = "SELECT count(*) FROM clears WHERE intent = ?1";
    const int64_t clears_before = sql_->integer(count_sql, intent);
    const std::string error = sql_->exec("INSERT INTO clears(intent, operator, reason) VALUES ('" + intent +
                                         "', 'sim-operator', 'reconciled by the simulated operator')");
    ++result_.operations;
    if (crashed_) {
      pending_clear_ = PendingClear{intent, clears_before};
      return log("operator clears " + intent + " -> answer lost in the power loss");
    }
    const RowView after = sql_->row(intent);
    checker_.done_kept(intent, before, after, "operator clear");
    if (sql_->integer(count_sql, intent) > clears_before) checker_.cleared(intent);
    log("operator clears " + intent + " (" + before.describe() + ") -> " + (error.empty() ? "cleared" : error));
  }

  void sweep(int slot) {
    Fence* fence = running(slot);
    if (!fence || crashed_) return;
    std::map<std::string, RowView> before;
    for (int k = 0; k < intents_; ++k) before[intent_name(k)] = sql_->row(intent_name(k));
    const int64_t swept = FenceInternal::sweep(*fence);
    ++result_.operations;
    if (crashed_) {
      pending_sweep_ = before;
      return log("process " + std::to_string(slot) + " sweeps -> answer lost in the power loss");
    }
    for (const auto& [intent, row] : before) checker_.swept(intent, row, sql_->row(intent), now_);
    log("process " + std::to_string(slot) + " sweeps -> " + std::to_string(swept));
  }

  void reap(int slot) {
    Fence* fence = running(slot);
    if (!fence || crashed_) return;
    const int64_t reaped = FenceInternal::reap_dead_holders(*fence);
    ++result_.operations;
    log("process " + std::to_string(slot) + " reaps dead holders -> " + std::to_string(reaped));
  }

  void clock_step() {
    const int64_t r = random_.between(0, 99);
    const int64_t by = r < 60 ? random_.between(kLeaseMs, 3 * kLeaseMs)
                              : r < 80 ? random_.between(result_ttl_ms_, 2 * result_ttl_ms_) : -random_.between(1, kLeaseMs);
    now_ += by;
    sync_sql_clock();
    log("the clock " + std::string(by >= 0 ? "jumps forward " : "steps back ") + std::to_string(by >= 0 ? by : -by) +
        " ms");
  }

  void lock_ledger() {
    if (locker_ || pg()) return;
    locker_ = std::make_unique<SqliteSql>(ledger_path());
    if (!locker_->exec("BEGIN IMMEDIATE").empty()) {
      locker_.reset();
      return;
    }
    locked_until_ = step_ + static_cast<int>(random_.between(1, 4));
    log("another connection holds the ledger's write lock until step " + std::to_string(locked_until_));
  }

  void fail_syncs() {
    if (pg()) return;
    failing_until_ = step_ + static_cast<int>(random_.between(0, 2));
    if (random_.chance(50)) {
      vfs_.fail_syncs_of("-wal");
      log("syncs of the log fail until step " + std::to_string(failing_until_));
    } else {
      vfs_.fail_writes_of("-wal", SQLITE_IOERR_WRITE);
      log("writes to the log fail until step " + std::to_string(failing_until_));
    }
  }

  void end_faults_due() {
    if (locker_ && locked_until_ < step_) {
      locker_->exec("COMMIT");
      locker_.reset();
      log("the other connection lets the write lock go");
    }
    if (failing_until_ >= 0 && failing_until_ < step_) {
      vfs_.fail_syncs_of("");
      vfs_.fail_writes_of("", SQLITE_OK);
      failing_until_ = -1;
      log("the log's syncs and writes work again");
    }
  }

  // Every process dies with the machine; the ledger comes back as the disk
  // held it at the instant of the loss (the last sync of each file).
  void power_loss(bool mid_operation) {
    if (!mid_operation) {
      fs::create_directories(next_dir());
      vfs_.crash_copy(dir(), next_dir());
    }
    armed_syncs_ = 0;
    ++result_.crashes;
    ++crashes_this_run_;
    if (config_.plant == Plant::lost_wal) fs::remove(next_dir() + "/ledger.sqlite-wal");
    for (Process& p : processes_) {
      p.fence.reset();
      p.down_until = step_ + 1;
    }
    alive_pids_.clear();
    for (Agent& a : agents_) a.phase = Phase::idle;
    locker_.reset();
    sql_.reset();
    vfs_.fail_syncs_of("");
    vfs_.fail_writes_of("", SQLITE_OK);
    failing_until_ = -1;
    const std::string old = dir();
    ++generation_;
    ++boot_;
    std::error_code ignored;
    fs::remove_all(old, ignored);
    crashed_ = false;
    log(std::string("power is lost") + (mid_operation ? " during a sync" : "") + "; the machine boots again");
    sql_ = make_sql();
    if (pending_clear_ && sql_->integer("SELECT count(*) FROM clears WHERE intent = ?1", pending_clear_->intent) >
                              pending_clear_->count_before) {
      checker_.cleared(pending_clear_->intent);
    }
    pending_clear_.reset();
    for (const auto& [intent, row] : pending_sweep_) checker_.swept(intent, row, sql_->row(intent), now_);
    pending_sweep_.clear();
    for (const std::string& intent : checker_.intents()) {
      const RowView row = sql_->row(intent);
      const bool cert = !row.cert_hash.empty() &&
                        sql_->integer("SELECT count(*) FROM certificates WHERE hash = ?1", row.cert_hash) > 0;
      checker_.survived_power_loss(intent, row, cert || row.cert_hash.empty());
    }
    certificates_kept("the power loss");
  }

  void certificates_kept(const std::string& when) {
    for (const std::string& hash : checker_.answered_certificates()) {
      if (sql_->integer("SELECT count(*) FROM certificates WHERE hash = ?1", hash) != 1) {
        checker_.violation("certificate " + hash.substr(0, 12) + ", answered, is missing after " + when);
      }
    }
  }

  void finish() {
    step_ = steps_ + 1;
    for (Process& p : processes_) p.fence.reset();
    locker_.reset();
    vfs_.fail_syncs_of("");
    vfs_.fail_writes_of("", SQLITE_OK);
    for (const std::string& intent : checker_.intents()) {
      const RowView row = sql_->row(intent);
      checker_.done_kept(intent, row, row, "the end of the run");
    }
    certificates_kept("the run");
    if (config_.verify_bin.empty()) return;
    ++result_.verified;
    sql_.reset();
    const std::string command = config_.verify_bin + " verify --db '" + ledger_path() + "' 2>&1";
    std::FILE* out = ::popen(command.c_str(), "r");
    std::string text;
    char buf[4096];
    while (out && std::fgets(buf, sizeof buf, out)) text += buf;
    const int status = out ? ::pclose(out) : -1;
    if (status != 0) checker_.violation("effectfence verify rejects the ledger: " + text);
  }

  struct PendingClear {
    std::string intent;
    int64_t count_before = 0;
  };

  Config config_;
  Random random_;
  PowerLossVfs vfs_;  // SQLite's default VFS while this world exists
  Checker checker_;
  RunResult result_;
  std::vector<Process> processes_;
  std::vector<Agent> agents_;
  int intents_ = 1, domains_ = 1, steps_ = 0;
  int64_t result_ttl_ms_ = 0;
  int step_ = 0;
  std::atomic<int64_t> now_{kStartMs};
  int generation_ = 0;  // which crash copy the ledger lives in
  int boot_ = 0;
  int64_t next_pid_ = 100;
  std::set<int64_t> alive_pids_;
  std::unique_ptr<Sql> sql_;
  std::unique_ptr<SqliteSql> locker_;
  std::string schema_, ledger_url_;  // PostgreSQL: this seed's schema, and the URL that selects it
  std::unique_ptr<PgSql> admin_;
  int locked_until_ = 0;
  int failing_until_ = -1;
  std::atomic<int> armed_syncs_{0};
  std::atomic<bool> crashed_{false};
  int crashes_this_run_ = 0;
  std::optional<PendingClear> pending_clear_;
  std::map<std::string, RowView> pending_sweep_;
};

}  // namespace

RunResult run_seed(const Config& config) {
  World world(config);
  return world.run();
}

}  // namespace effectfence::sim
