// The wrapped MCP server: started, initialised and listed once, restarted
// (with backoff) after it dies, and never restarted before the death of the
// previous one has been fully handled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "effectfence/json.h"
#include "mcp/child_process.h"
#include "mcp/client.h"
#include "mcp/log.h"

namespace effectfence::mcp {

// A started server: the process (null when the server is not a process of
// ours, as in tests) and the client that speaks to it. The client goes
// first, so it stops reading before the process is stopped.
struct ChildLink {
  std::unique_ptr<ChildProcess> process;
  std::unique_ptr<McpClient> client;
  ~ChildLink();
};

// Starts a server and connects a client with these handlers, or returns
// the error when it cannot.
using Launcher = std::function<StatusOr<std::unique_ptr<ChildLink>>(McpClient::Handlers handlers)>;

// Runs argv as a child process; its stderr lines go to log prefixed
// with "child[pid]:".
Launcher process_launcher(std::vector<std::string> argv, Logger& log);

struct RestartPolicy {
  // A child that lived at least this long counts as healthy: the next
  // restart after its death is immediate.
  std::chrono::milliseconds stable_after{10'000};
  // Delay before the 2nd consecutive restart; doubles up to max_delay.
  std::chrono::milliseconds first_delay{1'000};
  std::chrono::milliseconds max_delay{30'000};
  std::chrono::milliseconds handshake_timeout{60'000};
};

class Upstream {
 public:
  // One incarnation of the child.
  struct Session {
    uint64_t generation = 0;
    Json initialize_result;  // the child's answer to initialize
    std::vector<Json> tools;  // its tools/list entries when it started
    std::vector<Json> sent_tools;  // the same entries as it wrote them (raw_json)
    std::unique_ptr<ChildLink> link;
    std::chrono::steady_clock::time_point started;
    McpClient& client() const { return *link->client; }
  };

  struct Events {
    // A notification from the current child (on its reading thread), as
    // McpClient::Handlers::on_notification.
    std::function<void(const std::string& method, const Json& params, const Json& sent_params)> on_notification;
    // The child of this generation died or its connection broke; called
    // once, on its reading thread, before any new child can start.
    std::function<void(uint64_t generation, const std::string& why)> on_death;
    // A request from a child other than ping (McpClient::Handlers::on_request).
    std::function<void(const Json& id, const std::string& method, const Json& params, const Json& sent_params,
                       std::function<void(Reply)> respond)>
        on_request;
  };

  Upstream(Launcher launcher, Json client_info, Logger& log, Events events, RestartPolicy policy = {});
  // Stops the child.
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Starts the first child, offering it the agent's protocol revision and
  // client capabilities in initialize, as every restarted child is too.
  // Returns the error if it cannot be started, initialised or listed.
  Status start(const ClientOffer& offer);
  // The live child, restarting it first if it died and its backoff has
  // passed, or why there is none to be had.
  StatusOr<std::shared_ptr<Session>> acquire();
  // True iff acquire() would return at once with the child already running
  // (it need not start one, nor wait for one starting).
  bool has_live_child() const;
  // Blocks until the death of that generation has been handled (on_death
  // returned), or returns at once if it has.
  void wait_death_handled(uint64_t generation);
  // The current child's tool list, read again, or the error if it cannot
  // be read (the child is gone, or answered badly). sent_tools, when given,
  // gets the entries as the child wrote them (raw_json).
  StatusOr<std::vector<Json>> list_tools(std::vector<Json>* sent_tools = nullptr);
  // Sends a notification to the live child, if there is one (a dead child
  // is not restarted for it). Returns false iff it was not sent.
  bool notify(const std::string& method, const Json& params);
  // Stops the child; acquire() fails from then on, and a request still
  // waiting on the child fails as closed at once.
  void stop();
  // Like stop(), but ends the child process now even while calls still use
  // it: they fail as if it had died (their connection closes). A child in
  // its handshake is ended too, so a start waiting for it returns at once.
  void stop_now();

 private:
  StatusOr<std::shared_ptr<Session>> launch(uint64_t generation);
  void on_closed(uint64_t generation, const std::string& why);
  bool live() const REQUIRES(mutex_);
  std::chrono::milliseconds next_delay() const REQUIRES(mutex_);

  const Launcher launcher_;
  const Json client_info_;
  ClientOffer client_offer_ GUARDED_BY(mutex_);
  Logger& log_;
  const Events events_;
  const RestartPolicy policy_;

  Mutex start_mutex_;  // one start at a time; held while a child starts
  mutable Mutex mutex_ ACQUIRED_AFTER(start_mutex_);
  CondVar death_handled_;
  std::shared_ptr<Session> current_ GUARDED_BY(mutex_);  // may be dead (see alive_)
  std::shared_ptr<Session> launching_ GUARDED_BY(mutex_);  // the child in its handshake, if any
  bool alive_ GUARDED_BY(mutex_) = false;
  uint64_t generation_ GUARDED_BY(mutex_) = 0;          // of current_
  uint64_t deaths_handled_upto_ GUARDED_BY(mutex_) = 0;  // every generation <= this is handled
  int consecutive_failures_ GUARDED_BY(mutex_) = 0;
  uint64_t failure_counted_for_ GUARDED_BY(mutex_) = 0;  // the generation whose death was last counted
  std::chrono::steady_clock::time_point next_start_at_ GUARDED_BY(mutex_) = {};
  std::string last_failure_ GUARDED_BY(mutex_);
  bool stopped_ GUARDED_BY(mutex_) = false;
};

}  // namespace effectfence::mcp
