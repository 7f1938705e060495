// MCP 2026-07-28 over Streamable HTTP: requests without a session. Each POST
// carries one request whose _meta says who sent it; its answer is the HTTP
// response, and a client that drops the connection before the answer is
// written has cancelled the request (as notifications/cancelled does on
// stdio): the answer is then never sent, so a fence_prepare admission it
// carried is withdrawn, not left in flight for nobody to commit.
//
// Every such request goes to one mcp::Server under an id of our own (two
// clients may both send id 1); the client's id is put back on the answer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/mutex.h"
#include "effectfence/json.h"
#include "mcp/log.h"
#include "mcp/server.h"

namespace effectfence::shared {

class StatelessRequests {
 public:
  // Builds the one server all stateless requests go to, when the first comes.
  using Build = std::function<std::unique_ptr<mcp::Server>(mcp::Server::Sink sink)>;
  // Returns true iff the client's connection is still open (no FIN or RST
  // seen); asked while a request waits and before its answer is handed over.
  using Connected = std::function<bool()>;

  StatelessRequests(Build build, mcp::Logger& log) : build_(std::move(build)), log_(log) {}
  // Finishes the server's calls (undelivered answers are withdrawn).
  ~StatelessRequests();
  StatelessRequests(const StatelessRequests&) = delete;
  StatelessRequests& operator=(const StatelessRequests&) = delete;

  // Handles one request (document is its parsed body). Returns its answer
  // line with the client's id, or "" when the client went away first (or
  // stopping became true), in which case nothing of it was delivered.
  std::string handle(Json document, const Connected& connected, const std::atomic<bool>& stopping);
  // Hands a notification to the server (notifications/cancelled is not
  // passed on: over HTTP a request is cancelled by closing its connection).
  void notify(const Json& document);
  size_t in_progress() const;
  // Wall-clock ms of the last request's end or start; 0 when none came.
  int64_t last_active_ms() const;

 private:
  // line and handover are touched only under mutex_ (a lock of the
  // StatelessRequests, which the analysis cannot name from here).
  struct Waiter {
    std::thread::id handler;        // the HTTP thread waiting for the answer
    std::optional<std::string> line;
    enum class Handover { pending, taken, refused } handover = Handover::pending;
  };

  mcp::Server& server();
  // The server's sink: hands line to the request waiting for it and, from
  // another thread, waits until that request took it or found its client
  // gone (then throws mcp::OutputClosed, so the answer counts as unsent).
  void deliver(const std::string& line);

  const Build build_;
  mcp::Logger& log_;
  std::once_flag built_;
  std::unique_ptr<mcp::Server> server_;

  mutable Mutex mutex_;
  CondVar changed_;
  std::map<std::string, std::shared_ptr<Waiter>> waiting_ GUARDED_BY(mutex_);  // by our id's dump()
  uint64_t next_id_ GUARDED_BY(mutex_) = 1;
  int64_t last_active_ms_ GUARDED_BY(mutex_) = 0;
};

}  // namespace effectfence::shared
