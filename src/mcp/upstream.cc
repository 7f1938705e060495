#include "mcp/upstream.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>

namespace effectfence::mcp {
namespace {

using Clock = std::chrono::steady_clock;

// One write per line, so the child's lines and ours never interleave.
void write_stderr_line(std::string line) {
  line += '\n';
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(2, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::string seconds(std::chrono::milliseconds ms) {
  return std::to_string((ms.count() + 999) / 1000) + " s";
}

}  // namespace

ChildLink::~ChildLink() {
  client.reset();  // stop reading first: the process's end of output is no news then
  process.reset();
}

Launcher process_launcher(std::vector<std::string> argv, Logger& log) {
  return [argv = std::move(argv), &log](McpClient::Handlers handlers) -> StatusOr<std::unique_ptr<ChildLink>> {
    auto process = ChildProcess::start(argv, [](pid_t pid, std::string_view line) {
      write_stderr_line("effectfence wrap: child[" + std::to_string(pid) + "]: " + std::string(line));
    });
    if (!process.ok()) return process.status();
    auto link = std::make_unique<ChildLink>();
    link->process = std::move(*process);
    log.info("started the child server (pid " + std::to_string(link->process->pid()) + "): " + describe_command(argv));
    link->client = std::make_unique<McpClient>(link->process->stdout_fd(), link->process->stdin_fd(), log,
                                               std::move(handlers), kMaxChildMessageBytes,
                                               link->process->exit_fd());
    return link;
  };
}

Upstream::Upstream(Launcher launcher, Json client_info, Logger& log, Events events, RestartPolicy policy)
    : launcher_(std::move(launcher)),
      client_info_(std::move(client_info)),
      log_(log),
      events_(std::move(events)),
      policy_(policy) {}

Upstream::~Upstream() { stop(); }

StatusOr<std::shared_ptr<Upstream::Session>> Upstream::launch(uint64_t generation) {
  McpClient::Handlers handlers;
  handlers.on_notification = events_.on_notification;
  handlers.on_closed = [this, generation](const std::string& why) { on_closed(generation, why); };
  handlers.on_request = events_.on_request;
  ClientOffer offer;
  {
    MutexLock lock(&mutex_);
    offer = client_offer_;
  }
  auto session = std::make_shared<Session>();
  session->generation = generation;
  session->started = Clock::now();
  auto link = launcher_(std::move(handlers));
  if (!link.ok()) return link.status();
  session->link = std::move(*link);
  {
    // stop_now() can end the handshake from here on: it may take a minute.
    MutexLock lock(&mutex_);
    if (stopped_) {
      return Status::Error("effectfence wrap is shutting down");
    }
    launching_ = session;
  }
  struct Landed {
    Upstream& upstream;
    ~Landed() {
      MutexLock lock(&upstream.mutex_);
      upstream.launching_.reset();
    }
  } landed{*this};

  auto init = initialize_client(session->client(), client_info_, policy_.handshake_timeout, offer);
  if (!init.ok() && !session->client().closed()) {
    // A server that speaks only 2026-07-28 refuses initialize: it is spoken
    // to statelessly, if server/discover says it can be.
    auto discovered = discover_client(session->client(), client_info_, policy_.handshake_timeout, offer);
    if (!discovered.ok()) return Status::Error(init.status().message() + "; then " + discovered.status().message());
    log_.info("the child server speaks only " + discovered->value("protocolVersion", std::string()) +
              ": it is spoken to statelessly");
    init = std::move(discovered);
  }
  if (!init.ok()) return init.status();
  session->initialize_result = std::move(*init);
  auto tools = list_all_tools(session->client(), policy_.handshake_timeout, &session->sent_tools);
  if (!tools.ok()) return tools.status();
  session->tools = std::move(*tools);
  return session;
}

Status Upstream::start(const ClientOffer& offer) {
  {
    MutexLock lock(&mutex_);
    client_offer_ = offer;
  }
  auto session = acquire();
  return session.ok() ? Status::Ok() : session.status();
}

bool Upstream::notify(const std::string& method, const Json& params) {
  std::shared_ptr<Session> session;
  {
    MutexLock lock(&mutex_);
    if (live()) session = current_;
  }
  return session && session->client().notify(method, params);
}

StatusOr<std::shared_ptr<Upstream::Session>> Upstream::acquire() {
  {
    MutexLock lock(&mutex_);
    if (stopped_) {
      return Status::Error("effectfence wrap is shutting down");
    }
    if (live()) return current_;
  }
  MutexLock starting(&start_mutex_);
  uint64_t generation;
  std::shared_ptr<Session> dead;
  {
    MutexLock lock(&mutex_);
    if (stopped_) {
      return Status::Error("effectfence wrap is shutting down");
    }
    if (live()) return current_;  // another caller restarted it meanwhile
    // Admissions sent to the dead child must be fenced before a new child
    // can be sent anything.
    while (!stopped_ && deaths_handled_upto_ < generation_) death_handled_.Wait(&mutex_);
    if (stopped_) {
      return Status::Error("effectfence wrap is shutting down");
    }
    const auto now = Clock::now();
    if (now < next_start_at_) {
      return Status::Error("the child server failed " + std::to_string(consecutive_failures_) +
                           " time(s) in a row (" + last_failure_ + "); the next start is in " +
                           seconds(std::chrono::duration_cast<std::chrono::milliseconds>(next_start_at_ - now)));
    }
    generation = ++generation_;
    dead = std::move(current_);
  }
  dead.reset();  // stops the old process, outside mutex_: its reader may need it

  auto launched = launch(generation);
  if (!launched.ok()) {
    const std::string& error = launched.status().message();
    // Destroying the link joined its reader: no on_closed for this
    // generation is running or will run, so its death is handled here.
    MutexLock lock(&mutex_);
    if (failure_counted_for_ != generation) ++consecutive_failures_;  // a death in the handshake counted already
    last_failure_ = error;
    next_start_at_ = Clock::now() + next_delay();
    deaths_handled_upto_ = std::max(deaths_handled_upto_, generation);
    death_handled_.NotifyAll();
    if (stopped_) {  // its handshake was given up by stop()
      return Status::Error("effectfence wrap is shutting down");
    }
    if (generation > 1) log_.error("could not restart the child server: " + error);  // the first: start() reports it
    return Status::Error("the child server could not be started: " + error);
  }
  std::shared_ptr<Session> session = std::move(*launched);
  MutexLock lock(&mutex_);
  if (stopped_) {
    // Stopped while this child was starting: it must not get any call.
    lock.Unlock();
    session.reset();
    return Status::Error("effectfence wrap is shutting down");
  }
  current_ = session;
  // on_closed may already have run for this generation, or may run later;
  // either way the child is alive only while its connection is open.
  alive_ = !session->client().closed();
  if (generation > 1) log_.info("the child server is running again (start " + std::to_string(generation) + ")");
  return session;
}

bool Upstream::has_live_child() const {
  MutexLock lock(&mutex_);
  return !stopped_ && live();
}

bool Upstream::live() const {
  // A closed connection is a death whose news may not have arrived yet.
  return alive_ && current_ && !current_->client().closed();
}

void Upstream::on_closed(uint64_t generation, const std::string& why) {
  {
    MutexLock lock(&mutex_);
    if (generation == generation_) alive_ = false;
    const bool short_lived = !current_ || current_->generation != generation ||
                             Clock::now() - current_->started < policy_.stable_after;
    consecutive_failures_ = short_lived ? consecutive_failures_ + 1 : 0;
    failure_counted_for_ = generation;
    last_failure_ = why;
    next_start_at_ = Clock::now() + next_delay();
  }
  bool was_running;
  {
    MutexLock lock(&mutex_);
    was_running = current_ && current_->generation == generation;  // else it died in its handshake
  }
  if (was_running) log_.error("the child server is gone: " + why + "; it is restarted for the next call");
  if (events_.on_death) events_.on_death(generation, why);
  MutexLock lock(&mutex_);
  deaths_handled_upto_ = std::max(deaths_handled_upto_, generation);
  death_handled_.NotifyAll();
}

std::chrono::milliseconds Upstream::next_delay() const {
  // The first quick death restarts at once; each further one in a row waits twice as long.
  if (consecutive_failures_ <= 1) return std::chrono::milliseconds(0);
  auto delay = policy_.first_delay;
  for (int i = 2; i < consecutive_failures_ && delay < policy_.max_delay; ++i) delay *= 2;
  return std::min(delay, policy_.max_delay);
}

void Upstream::wait_death_handled(uint64_t generation) {
  MutexLock lock(&mutex_);
  while (!stopped_ && deaths_handled_upto_ < generation) death_handled_.Wait(&mutex_);
}

StatusOr<std::vector<Json>> Upstream::list_tools(std::vector<Json>* sent_tools) {
  std::shared_ptr<Session> session;
  {
    MutexLock lock(&mutex_);
    if (alive_) session = current_;
  }
  if (!session) {
    return Status::Error("the child server is not running");
  }
  return list_all_tools(session->client(), policy_.handshake_timeout, sent_tools);
}

void Upstream::stop_now() {
  std::shared_ptr<Session> running;
  std::shared_ptr<Session> starting;
  {
    MutexLock lock(&mutex_);
    stopped_ = true;
    running = current_;
    starting = launching_;
  }
  for (const auto& session : {running, starting}) {
    if (!session || !session->link || !session->link->process) continue;
    // Signals only: its stdin stays open (and its fd number taken) while
    // calls may still write to it.
    ChildProcess& process = *session->link->process;
    process.signal(SIGTERM);
    if (!process.wait_exit(std::chrono::milliseconds(500))) {
      process.signal(SIGKILL);
      process.wait_exit(std::chrono::seconds(5));
    }
  }
  stop();
}

void Upstream::stop() {
  std::shared_ptr<Session> last;
  std::shared_ptr<Session> starting;
  {
    MutexLock lock(&mutex_);
    stopped_ = true;
    alive_ = false;
    last = std::move(current_);
    starting = launching_;
    death_handled_.NotifyAll();
  }
  // A child still in its handshake is given up: whoever waits for it (a
  // call, the tool list's refresh) is told at once, not after the handshake
  // timeout.
  if (starting && starting->link && starting->link->client) {
    starting->link->client->give_up("effectfence wrap is shutting down");
  }
  // So is a request to the running child that nobody finishes now: the
  // calls were drained before the stop, and a refresh of its tool list
  // would otherwise hold the stop (and every stop signal) for a minute.
  if (last && last->link && last->link->client) last->link->client->give_up("effectfence wrap is shutting down");
  last.reset();
}

}  // namespace effectfence::mcp
