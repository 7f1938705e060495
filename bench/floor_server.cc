// effectfence_floor: the least any server of `serve`'s shape can do per
// prepare+commit pair on this machine, run by the same benchmark as `serve`
// (`effectfence_bench --bin ./build/bench/effectfence_floor`).
//
// It speaks the benchmark's part of MCP over stdio (initialize, ping,
// fence_prepare, fence_commit, fence_stats) and keeps only what no fence can
// leave out: a JSON parse of each request, the payload's canonical JSON and
// SHA-256, a random token, the certificate's canonical JSON and SHA-256, the
// rows a pair needs (the domain's next seq, the intent, its certificate, the
// intent marked done) written by one writer thread in group-committed
// BEGIN IMMEDIATE transactions (WAL, synchronous=FULL), and an answer with
// structuredContent and the same JSON as text, sent only after its commit.
//
// EFFECTFENCE_FLOOR_CERTS picks how certificates are keyed, to measure what
// pages written at random places in the file cost the writer (a hash lands
// on a leaf of its own in a large table): `hash` (the default) keys the rows
// by their hash; `indexed` appends them under an integer key and indexes the
// hash, as serve's ledger does; `appended` appends them with no index on the
// hash, which leaves no way to find a certificate by its hash; `derived`
// appends them and keeps the hash index as derived data in a file of its own
// that is never synced, written after each commit's answers are on their
// way (a crash would have it rebuilt from the certificates; this instrument
// never reopens a ledger). EFFECTFENCE_FLOOR_AUDIT=1 adds an audit event per
// decision and a counter per transaction, at their cheapest. At exit the
// floor writes to stderr where its writer's time went.
//
// Left out, because it is what `serve` adds on top of the floor: the audit
// events and counters (unless asked for), guards (triggers), secondary
// indexes, savepoints, leases, holders, read-sets, clocks, input validation
// and every refusal path. This is a measuring instrument, not a fence: it
// trusts its one client.
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/random_token.h"
#include "core/sha256.h"
#include "effectfence/json.h"
#include "ledger/sqlite_ledger.h"
#include "latency.h"
#include "ledger/wal_write_batching.h"

namespace {

using Json = nlohmann::json;

// Opened as serve opens its writer: through the VFS that hands a commit's
// log frames to the kernel in one write (ledger/wal_write_batching.h).
class Db {
 public:
  // batched: through the VFS that writes a commit's log frames at once,
  // which needs synchronous = FULL.
  explicit Db(const std::string& path, bool batched = true) {
    effectfence::BatchedLogVfs vfs;  // registered only while the connection is opened
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        batched ? vfs.name() : nullptr) != SQLITE_OK) {
      fail("open " + path);
    }
  }
  ~Db() {
    for (sqlite3_stmt* s : statements_) sqlite3_finalize(s);
    sqlite3_close(db_);
  }
  void exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
  }
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) fail(sql);
    statements_.push_back(s);
    return s;
  }
  // Steps once; returns true on a row. The statement is reset by the caller.
  bool step(sqlite3_stmt* s) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail(sqlite3_sql(s));
    return false;
  }
  sqlite3* handle() { return db_; }
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("sqlite: " + what + ": " + sqlite3_errmsg(db_));
  }

 private:
  sqlite3* db_ = nullptr;
  std::vector<sqlite3_stmt*> statements_;
};

void bind_text(sqlite3_stmt* s, int index, const std::string& text) {
  sqlite3_bind_text(s, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

struct Job {
  bool is_commit = false;
  std::string id;  // the request's id, as JSON text
  std::string intent, domain, tool, args, agent, payload_hash, token;
  int64_t seq = 0;  // a commit's from its ticket, a prepare's once reserved
  int64_t cert_id = 0;
  std::string cert_hash, cert_body;
  const char* refusal = nullptr;  // set when the writer refused it
};

std::string tool_answer(const std::string& id, const Json& structured) {
  const std::string text = structured.dump();
  Json text_block = {{"type", "text"}, {"text", text}};
  return "{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{\"content\":[" + text_block.dump() +
         "],\"structuredContent\":" + text + "}}\n";
}

// The answer to a decided job, built off the writer's thread.
std::string answer_to(const Job& job) {
  if (job.refusal) return tool_answer(job.id, {{"status", "refused"}, {"reason", job.refusal}});
  if (job.is_commit) {
    return tool_answer(job.id, {{"status", "committed"},
                                {"cert",
                                 {{"hash", job.cert_hash},
                                  {"intent", job.intent},
                                  {"domain", job.domain},
                                  {"seq", job.seq}}}});
  }
  return tool_answer(job.id, {{"status", "fresh"},
                              {"prepared",
                               {{"intent", job.intent},
                                {"domain", job.domain},
                                {"seq", job.seq},
                                {"generation", 1},
                                {"token", job.token}}}});
}

// A thread of this instrument that fails ends the process, loudly: the
// benchmark then reports the floor's exit status and its log.
template <typename Body>
void run_or_exit(const char* name, Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_floor: %s: %s\n", name, e.what());
    std::_Exit(1);
  }
}

// The answers to a batch of decided jobs, as one write's worth of lines.
std::string answers_to(const std::vector<Job>& jobs) {
  std::string text;
  for (const Job& job : jobs) text += answer_to(job);
  return text;
}

// Jobs handed from one thread to another: every job queued while the taker
// was busy is taken at once.
class JobQueue {
 public:
  void push(Job job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(job));
    }
    wake_.notify_one();
  }
  void push_all(std::vector<Job>& jobs) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Job& job : jobs) queue_.push_back(std::move(job));
    }
    wake_.notify_one();
  }
  // Waits for jobs and moves them all into `taken` (emptied first); false
  // once stop() was called and nothing is left.
  bool take_all(std::vector<Job>& taken) {
    taken.clear();
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    taken.swap(queue_);
    return !taken.empty();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Job> queue_;
  bool stopping_ = false;
};

// Lines to stdout, whole, from any thread. write() sends at once; post()
// hands a committed batch's answers to a thread of their own, as serve
// does, so the writer goes on to the next transaction.
class Output {
 public:
  Output() : thread_([this] { run_or_exit("answers", [this] { run(); }); }) {}
  ~Output() {
    queue_.stop();
    thread_.join();
  }
  void write(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(1, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(std::string("stdout: ") + (n == 0 ? "closed" : std::strerror(errno)));
      done += static_cast<size_t>(n);
    }
  }
  void post(std::vector<Job>& decided) { queue_.push_all(decided); }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "ledger-answers");
    for (std::vector<Job> batch; queue_.take_all(batch);) write(answers_to(batch));
  }

  std::mutex mutex_;
  JobQueue queue_;
  std::thread thread_;
};

// EFFECTFENCE_FLOOR_CERTS=derived: certificates' hashes indexed in a file of
// their own that is never synced, after their commit and its answers:
// derived data, which a crash would have rebuilt from the certificates, and
// which no answer waits for. (Written by a thread of its own instead, it
// measured no faster: one more thread on two cores.)
class DerivedHashIndex {
 public:
  explicit DerivedHashIndex(const std::string& path)
      : db_(path, false) {  // SQLite's own VFS: the batching one needs synchronous = FULL
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec("PRAGMA synchronous = OFF");
    db_.exec("CREATE TABLE IF NOT EXISTS hashes (hash TEXT PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID");
    begin_ = db_.prepare("BEGIN IMMEDIATE");
    commit_ = db_.prepare("COMMIT");
    insert_ = db_.prepare("INSERT INTO hashes (hash, id) VALUES (?1, ?2)");
  }
  void add_committed(const std::vector<Job>& batch) {
    for (const Job& job : batch) {
      if (job.is_commit && !job.refusal) queued_.emplace_back(job.cert_hash, job.cert_id);
    }
  }
  // Writes what was added since the last call, in one transaction.
  void write_added() {
    if (queued_.empty()) return;
    step_and_reset(begin_);
    for (const auto& [hash, id] : queued_) {
      bind_text(insert_, 1, hash);
      sqlite3_bind_int64(insert_, 2, id);
      step_and_reset(insert_);
    }
    step_and_reset(commit_);
    queued_.clear();
  }

 private:
  void step_and_reset(sqlite3_stmt* s) {
    db_.step(s);
    sqlite3_reset(s);
  }

  Db db_;
  sqlite3_stmt* begin_;
  sqlite3_stmt* commit_;
  sqlite3_stmt* insert_;
  std::vector<std::pair<std::string, int64_t>> queued_;  // committed, not yet written
};

// The rows, decided a batch per BEGIN IMMEDIATE transaction.
class Ledger {
 public:
  enum class CertificateKey { hash, indexed, appended, derived };

  // audit: each decision also appends an event (no index on it) and each
  // transaction counts its decisions in a counters row, as the append-only
  // event log and counters a fence keeps, at their cheapest.
  Ledger(const std::string& path, CertificateKey certificate_key, bool audit) : db_(path) {
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec("PRAGMA synchronous = FULL");
    db_.exec("PRAGMA temp_store = MEMORY");
    sqlite3_wal_hook(db_.handle(), &Ledger::after_commit, this);
    db_.exec(
        "CREATE TABLE IF NOT EXISTS intents (intent TEXT PRIMARY KEY, state TEXT NOT NULL, domain TEXT NOT NULL, "
        "seq INTEGER NOT NULL, token TEXT NOT NULL, tool TEXT NOT NULL, args TEXT NOT NULL, "
        "payload_hash TEXT NOT NULL, agent TEXT NOT NULL, cert_hash TEXT) WITHOUT ROWID");
    db_.exec("CREATE TABLE IF NOT EXISTS domains (domain TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID");
    db_.exec(certificate_table(certificate_key));
    if (certificate_key == CertificateKey::derived) {
      derived_index_ = std::make_unique<DerivedHashIndex>(path + ".hashes");
    }
    begin_ = db_.prepare("BEGIN IMMEDIATE");
    commit_ = db_.prepare("COMMIT");
    find_ = db_.prepare("SELECT state, token FROM intents WHERE intent = ?1");
    reserve_ = db_.prepare("UPDATE domains SET seq = seq + 1 WHERE domain = ?1 RETURNING seq");
    new_domain_ = db_.prepare("INSERT INTO domains (domain, seq) VALUES (?1, 1)");
    admit_ = db_.prepare(
        "INSERT INTO intents (intent, state, domain, seq, token, tool, args, payload_hash, agent) "
        "VALUES (?1, 'in_flight', ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    certify_ = db_.prepare("INSERT INTO certificates (hash, intent, domain, seq, body) VALUES (?1, ?2, ?3, ?4, ?5)");
    finish_ = db_.prepare("UPDATE intents SET state = 'done', cert_hash = ?1 WHERE intent = ?2");
    if (audit) {
      db_.exec(
          "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind TEXT NOT NULL, "
          "intent TEXT NOT NULL, domain TEXT NOT NULL, seq INTEGER NOT NULL)");
      db_.exec("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID");
      db_.exec("INSERT OR IGNORE INTO counters (name, value) VALUES ('decisions', 0)");
      record_ = db_.prepare(
          "INSERT INTO events (at, kind, intent, domain, seq) VALUES (?5, ?1, ?2, ?3, ?4)");
      count_ = db_.prepare("UPDATE counters SET value = value + ?1 WHERE name = 'decisions'");
    }
  }

  // Decides every job in one durable transaction.
  void decide(std::vector<Job>& batch) {
    const Clock::time_point start = Clock::now();
    run_step(begin_);
    for (Job& job : batch) {
      job.is_commit ? commit(job) : prepare(job);
      if (record_ && !job.refusal) record(job);
    }
    if (count_) {
      sqlite3_bind_int64(count_, 1, static_cast<int64_t>(batch.size()));
      run_step(count_);
    }
    const Clock::time_point decided = Clock::now();
    run_step(commit_);
    time_.statements_s += seconds_between(start, decided);
    time_.commit_s += seconds_between(decided, Clock::now());
    if (derived_index_) derived_index_->add_committed(batch);
    transactions_ += 1;
    decisions_ += static_cast<int64_t>(batch.size());
  }
  int64_t transactions() const { return transactions_; }
  int64_t decisions() const { return decisions_; }

  // `derived`: the hashes committed since the last call, into their index.
  // Called once the batch's answers are on their way.
  void index_committed() {
    if (!derived_index_) return;
    const Clock::time_point start = Clock::now();
    derived_index_->write_added();
    time_.derived_index_s += seconds_between(start, Clock::now());
  }

  // Where the writer's time went: one line for floor.log.
  std::string time_report() const {
    char line[320];
    std::snprintf(line, sizeof line,
                  "writer: %lld transactions, %lld decisions; statements %.3f s, COMMIT %.3f s (of which "
                  "checkpoints %.3f s), derived hash index %.3f s; %lld log frames, %.2f per decision\n",
                  static_cast<long long>(transactions_), static_cast<long long>(decisions_.load()),
                  time_.statements_s, time_.commit_s, time_.checkpoint_s, time_.derived_index_s,
                  static_cast<long long>(time_.log_frames),
                  decisions_ > 0 ? static_cast<double>(time_.log_frames) / static_cast<double>(decisions_) : 0.0);
    return line;
  }

 private:
  static const char* certificate_table(CertificateKey key) {
    switch (key) {
      case CertificateKey::hash:
        return "CREATE TABLE IF NOT EXISTS certificates (hash TEXT PRIMARY KEY, intent TEXT NOT NULL, "
               "domain TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL) WITHOUT ROWID";
      case CertificateKey::indexed:  // as serve's: rows appended, the hash in an index of its own
        return "CREATE TABLE IF NOT EXISTS certificates (id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, "
               "intent TEXT NOT NULL, domain TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL)";
      case CertificateKey::appended:
      case CertificateKey::derived:
        break;
    }
    return "CREATE TABLE IF NOT EXISTS certificates (id INTEGER PRIMARY KEY, hash TEXT NOT NULL, "
           "intent TEXT NOT NULL, domain TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL)";
  }

  using Clock = effectfence::bench::Clock;
  static constexpr auto seconds_between = effectfence::bench::seconds_between;

  // Called by SQLite inside each COMMIT, with the frames now in the log. It
  // checkpoints as SQLite's own automatic checkpoint does (at 1000 frames),
  // timing it and counting the frames each commit added.
  static int after_commit(void* self, sqlite3* db, const char* name, int frames_in_log) {
    Ledger& ledger = *static_cast<Ledger*>(self);
    WriterTime& time = ledger.time_;
    time.log_frames += frames_in_log >= time.frames_in_log ? frames_in_log - time.frames_in_log : frames_in_log;
    time.frames_in_log = frames_in_log;
    if (frames_in_log >= 1000) {
      const Clock::time_point start = Clock::now();
      sqlite3_wal_checkpoint(db, name);
      time.checkpoint_s += seconds_between(start, Clock::now());
    }
    return SQLITE_OK;
  }

  void run_step(sqlite3_stmt* s) {
    db_.step(s);
    sqlite3_reset(s);
  }

  void record(const Job& job) {
    sqlite3_bind_text(record_, 1, job.is_commit ? "committed" : "admitted", -1, SQLITE_STATIC);
    bind_text(record_, 2, job.intent);
    bind_text(record_, 3, job.domain);
    sqlite3_bind_int64(record_, 4, job.seq);
    sqlite3_bind_int64(record_, 5, std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch()).count());
    run_step(record_);
  }

  void prepare(Job& job) {
    bind_text(find_, 1, job.intent);
    const bool known = db_.step(find_);
    sqlite3_reset(find_);
    if (known) {
      job.refusal = "in_flight";
      return;
    }
    bind_text(reserve_, 1, job.domain);
    int64_t seq = 1;
    if (db_.step(reserve_)) {
      seq = sqlite3_column_int64(reserve_, 0);
      sqlite3_reset(reserve_);
    } else {
      sqlite3_reset(reserve_);
      bind_text(new_domain_, 1, job.domain);
      run_step(new_domain_);
    }
    bind_text(admit_, 1, job.intent);
    bind_text(admit_, 2, job.domain);
    sqlite3_bind_int64(admit_, 3, seq);
    bind_text(admit_, 4, job.token);
    bind_text(admit_, 5, job.tool);
    bind_text(admit_, 6, job.args);
    bind_text(admit_, 7, job.payload_hash);
    bind_text(admit_, 8, job.agent);
    run_step(admit_);
    job.seq = seq;
  }

  void commit(Job& job) {
    bind_text(find_, 1, job.intent);
    const bool known = db_.step(find_);
    const bool holds = known && std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(find_, 1)),
                                            job.token.c_str()) == 0;
    sqlite3_reset(find_);
    if (!holds) {
      job.refusal = "lease_lost";
      return;
    }
    bind_text(certify_, 1, job.cert_hash);
    bind_text(certify_, 2, job.intent);
    bind_text(certify_, 3, job.domain);
    sqlite3_bind_int64(certify_, 4, job.seq);
    bind_text(certify_, 5, job.cert_body);
    run_step(certify_);
    job.cert_id = sqlite3_last_insert_rowid(db_.handle());
    bind_text(finish_, 1, job.cert_hash);
    bind_text(finish_, 2, job.intent);
    run_step(finish_);
  }

  struct WriterTime {
    double statements_s = 0;  // BEGIN and the decisions' statements
    double commit_s = 0;      // COMMIT: the log's write and sync, and any checkpoint
    double checkpoint_s = 0;
    double derived_index_s = 0;  // `derived`: the hashes written after the answers
    int64_t log_frames = 0;   // pages the commits appended to the log
    int frames_in_log = 0;    // after the last commit
  };

  Db db_;
  std::unique_ptr<DerivedHashIndex> derived_index_;
  WriterTime time_;
  sqlite3_stmt* begin_;
  sqlite3_stmt* commit_;
  sqlite3_stmt* find_;
  sqlite3_stmt* reserve_;
  sqlite3_stmt* new_domain_;
  sqlite3_stmt* admit_;
  sqlite3_stmt* certify_;
  sqlite3_stmt* finish_;
  sqlite3_stmt* record_ = nullptr;  // audit only
  sqlite3_stmt* count_ = nullptr;
  std::atomic<int64_t> transactions_{0};
  std::atomic<int64_t> decisions_{0};
};

// The ledger on a writer thread of its own, as serve has it: every job
// queued while a transaction commits goes into the next one.
class Writer {
 public:
  // answers_inline: the writer writes a batch's answers itself, one hand-off
  // fewer, instead of posting them to the answer thread.
  Writer(Ledger& ledger, Output& out, bool answers_inline)
      : ledger_(ledger),
        out_(out),
        answers_inline_(answers_inline),
        thread_([this] { run_or_exit("writer", [this] { run(); }); }) {}
  ~Writer() {
    queue_.stop();
    thread_.join();
  }
  void submit(Job job) { queue_.push(std::move(job)); }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "ledger-writer");
    for (std::vector<Job> batch; queue_.take_all(batch);) {
      ledger_.decide(batch);
      if (answers_inline_) {
        out_.write(answers_to(batch));
      } else {
        out_.post(batch);
      }
      ledger_.index_committed();
    }
  }

  Ledger& ledger_;
  Output& out_;
  const bool answers_inline_;
  JobQueue queue_;
  std::thread thread_;
};

// What this process admitted, for sealing its commits' certificates.
struct Admission {
  std::string tool, agent;
  Json args;
};

// Reads requests, seals what it can before the ledger, and hands decisions
// on: to the writer thread, or (threads == 1) to the ledger itself once
// every line of one read is handled, so one thread reads, decides and
// answers, and the requests that arrive during a commit make the next batch.
class Server {
 public:
  Server(const std::string& db_path, int threads, Ledger::CertificateKey certificate_key, bool audit)
      : ledger_(db_path, certificate_key, audit) {
    if (threads > 1) writer_ = std::make_unique<Writer>(ledger_, out_, threads == 2);
  }
  ~Server() {
    writer_.reset();
    std::fputs(ledger_.time_report().c_str(), stderr);
  }

  void handle(const std::string& line) {
    const Json request = Json::parse(line);
    const auto id_it = request.find("id");
    if (id_it == request.end()) return;  // a notification
    const std::string id = id_it->dump();
    const std::string method = request.at("method").get<std::string>();
    if (method == "initialize") {
      out_.write("{\"jsonrpc\":\"2.0\",\"id\":" + id +
                 ",\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{}},"
                 "\"serverInfo\":{\"name\":\"effectfence_floor\",\"version\":\"1\"}}}\n");
    } else if (method == "ping") {
      out_.write("{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{}}\n");
    } else if (method == "tools/call") {
      call(id, request.at("params"));
    } else {
      out_.write("{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"error\":{\"code\":-32601,\"message\":\"unknown\"}}\n");
    }
  }

  // Single-thread mode: decides what the lines of one read asked for.
  void end_of_read() {
    if (held_.empty()) return;
    ledger_.decide(held_);
    out_.write(answers_to(held_));
    held_.clear();
    ledger_.index_committed();
  }

 private:
  void call(const std::string& id, const Json& params) {
    const std::string name = params.at("name").get<std::string>();
    const Json& args = params.at("arguments");
    if (name == "fence_prepare") {
      Job job;
      job.id = id;
      job.intent = args.at("intent").get<std::string>();
      job.domain = args.at("domain").get<std::string>();
      job.tool = args.at("tool").get<std::string>();
      job.agent = args.at("agent").get<std::string>();
      job.args = effectfence::canonicalize(args.at("args"));
      job.payload_hash =
          effectfence::sha256_hex(effectfence::canonicalize(Json{{"args", args.at("args")}, {"tool", job.tool}}));
      job.token = effectfence::random_token_hex();
      admissions_[job.intent] = Admission{job.tool, job.agent, args.at("args")};
      decide(std::move(job));
    } else if (name == "fence_commit") {
      const Json& ticket = args.at("prepared");
      Job job;
      job.is_commit = true;
      job.id = id;
      job.intent = ticket.at("intent").get<std::string>();
      job.domain = ticket.at("domain").get<std::string>();
      job.seq = ticket.at("seq").get<int64_t>();
      job.token = ticket.at("token").get<std::string>();
      const auto admitted = admissions_.find(job.intent);
      if (admitted == admissions_.end()) throw std::runtime_error("commit of an intent this process did not admit");
      job.cert_body = effectfence::canonicalize(Json{{"intent", job.intent},
                                                     {"domain", job.domain},
                                                     {"seq", job.seq},
                                                     {"generation", 1},
                                                     {"tool", admitted->second.tool},
                                                     {"args", std::move(admitted->second.args)},
                                                     {"result", args.at("result")},
                                                     {"agent", admitted->second.agent}});
      job.cert_hash = effectfence::sha256_hex(job.cert_body);
      admissions_.erase(admitted);
      decide(std::move(job));
    } else if (name == "fence_stats") {
      out_.write(tool_answer(id, {{"batching",
                                   {{"transactions", ledger_.transactions()}, {"decisions", ledger_.decisions()}}}}));
    } else {
      out_.write("{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"error\":{\"code\":-32602,\"message\":\"unknown tool\"}}\n");
    }
  }

  void decide(Job job) {
    if (writer_) {
      writer_->submit(std::move(job));
    } else {
      held_.push_back(std::move(job));
    }
  }

  Output out_;
  Ledger ledger_;
  std::unique_ptr<Writer> writer_;
  std::vector<Job> held_;
  std::unordered_map<std::string, Admission> admissions_;
};

}  // namespace

// EFFECTFENCE_FLOOR_CERTS: hash (the default), indexed, appended or derived,
// as above. EFFECTFENCE_FLOOR_AUDIT=1: an event appended per decision and a
// counter per transaction (Ledger).
// EFFECTFENCE_FLOOR_THREADS: 3 (the default) reads on the main thread,
// decides on a writer thread and answers on a third, as serve does; 2 has the
// writer answer; 1 does everything on one thread.
int main(int argc, char** argv) {
  std::string db_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--db") == 0) db_path = argv[i + 1];
  }
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0 || db_path.empty()) {
    std::fprintf(stderr, "usage: effectfence_floor serve --db PATH\n");
    return 2;
  }
  effectfence::configure_sqlite_for_process();  // as serve: no allocation statistics
  const char* threads_text = std::getenv("EFFECTFENCE_FLOOR_THREADS");
  const int threads = threads_text == nullptr ? 3 : std::atoi(threads_text);
  if (threads < 1 || threads > 3) {
    std::fprintf(stderr, "effectfence_floor: EFFECTFENCE_FLOOR_THREADS must be 1, 2 or 3\n");
    return 2;
  }
  const char* certs_text = std::getenv("EFFECTFENCE_FLOOR_CERTS");
  const std::string certs = certs_text == nullptr ? "hash" : certs_text;
  const std::map<std::string, Ledger::CertificateKey> certificate_keys = {
      {"hash", Ledger::CertificateKey::hash},
      {"indexed", Ledger::CertificateKey::indexed},
      {"appended", Ledger::CertificateKey::appended},
      {"derived", Ledger::CertificateKey::derived}};
  if (certificate_keys.count(certs) == 0) {
    std::fprintf(stderr, "effectfence_floor: EFFECTFENCE_FLOOR_CERTS must be hash, indexed, appended or derived\n");
    return 2;
  }
  const char* audit_text = std::getenv("EFFECTFENCE_FLOOR_AUDIT");
  const bool audit = audit_text != nullptr && std::strcmp(audit_text, "1") == 0;
  if (audit_text != nullptr && !audit && std::strcmp(audit_text, "0") != 0) {
    std::fprintf(stderr, "effectfence_floor: EFFECTFENCE_FLOOR_AUDIT must be 0 or 1\n");
    return 2;
  }
  try {
    Server server(db_path, threads, certificate_keys.at(certs), audit);
    std::string pending;
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(0, buffer, sizeof buffer);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("stdin: ") + std::strerror(errno));
      }
      pending.append(buffer, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
        if (end > start) server.handle(pending.substr(start, end - start));
      }
      pending.erase(0, start);
      server.end_of_read();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "effectfence_floor: %s\n", e.what());
    return 1;
  }
  return 0;
}
