#include "shared_server/stateless_requests.h"

#include <chrono>

#include "mcp/jsonrpc.h"
#include "shared_server/lease.h"

namespace effectfence::shared {
namespace {

// How often a waiting request looks whether its client is still there.
constexpr auto kConnectionCheck = std::chrono::milliseconds(50);
// How long an answer waits for its request's thread to take it: that thread
// checks at least every kConnectionCheck, so this only bounds a stuck one.
constexpr auto kHandoverLimit = std::chrono::seconds(10);

}  // namespace

StatelessRequests::~StatelessRequests() {
  if (server_) server_->drain();
  server_.reset();
}

mcp::Server& StatelessRequests::server() {
  std::call_once(built_, [this] { server_ = build_([this](const std::string& line) { deliver(line); }); });
  return *server_;
}

size_t StatelessRequests::in_progress() const {
  MutexLock lock(&mutex_);
  return waiting_.size();
}

int64_t StatelessRequests::last_active_ms() const {
  MutexLock lock(&mutex_);
  return last_active_ms_;
}

void StatelessRequests::notify(const Json& document) {
  if (document.value("method", std::string()) == "notifications/cancelled") {
    log_.debug("a stateless notifications/cancelled ignored: over HTTP a request is cancelled by closing its connection");
    return;
  }
  server().handle_line(mcp::jsonrpc::serialize(document));
}

std::string StatelessRequests::handle(Json document, const Connected& connected, const std::atomic<bool>& stopping) {
  mcp::Server& to = server();
  const Json client_id = document["id"];
  if (document.value("method", std::string()) == "subscriptions/listen") {
    // Its stream would hold an HTTP thread for as long as the client
    // listens, for changes that never come: the fence tools are fixed.
    return mcp::jsonrpc::serialize(mcp::jsonrpc::error_response(
        client_id, mcp::jsonrpc::kMethodNotFound,
        "subscriptions/listen is not offered over HTTP by the shared server: its tool list never changes "
        "(capabilities say listChanged: false)"));
  }
  auto waiter = std::make_shared<Waiter>();
  waiter->handler = std::this_thread::get_id();
  Json our_id;
  {
    MutexLock lock(&mutex_);
    our_id = "stateless-" + std::to_string(next_id_++);
    waiting_[our_id.dump()] = waiter;
    last_active_ms_ = wall_clock_ms();
  }
  document["id"] = our_id;
  to.handle_line(mcp::jsonrpc::serialize(document));

  MutexLock lock(&mutex_);
  bool gone = false;
  while (!waiter->line) {
    if (stopping) break;
    changed_.WaitFor(&mutex_, kConnectionCheck);
    if (waiter->line) break;
    lock.Unlock();
    gone = !connected();
    lock.Lock();
    if (gone) break;
  }
  std::string answer;
  if (waiter->line) {
    // Handed over only to a client still connected: otherwise the server
    // learns that its answer was not delivered.
    lock.Unlock();
    const bool there = connected();
    lock.Lock();
    // Still pending unless the answering thread stopped waiting for us.
    if (waiter->handover == Waiter::Handover::pending) {
      waiter->handover = there ? Waiter::Handover::taken : Waiter::Handover::refused;
    }
    if (waiter->handover == Waiter::Handover::taken) answer = *waiter->line;
    else gone = true;
  } else {
    waiter->handover = Waiter::Handover::refused;
  }
  waiting_.erase(our_id.dump());
  last_active_ms_ = wall_clock_ms();
  changed_.NotifyAll();
  lock.Unlock();

  if (gone && !waiter->line) {
    log_.info(document.value("method", std::string("a request")) + " " + client_id.dump() +
              ": the client closed its connection before the answer; cancelled");
    to.handle_line(mcp::jsonrpc::serialize(mcp::jsonrpc::notification(
        "notifications/cancelled", {{"requestId", our_id}, {"reason", "the HTTP client closed its connection"}})));
  } else if (gone) {
    log_.info(document.value("method", std::string("a request")) + " " + client_id.dump() +
              ": the client closed its connection before its answer was written; not delivered");
  }
  if (answer.empty()) return "";
  Json message = Json::parse(answer, nullptr, false);
  if (!message.is_object()) return "";
  message["id"] = client_id;
  return mcp::jsonrpc::serialize(message);
}

void StatelessRequests::deliver(const std::string& line) {
  const Json message = Json::parse(line, nullptr, false);
  if (!message.is_object() || !message.contains("id")) {
    // A notification (progress, a log message): no stream is open for it.
    log_.debug("a notification to a stateless client was not sent: it has no stream open");
    return;
  }
  MutexLock lock(&mutex_);
  auto it = waiting_.find(message["id"].dump());
  if (it == waiting_.end()) throw mcp::OutputClosed("the HTTP client of " + message["id"].dump() + " is gone");
  std::shared_ptr<Waiter> waiter = it->second;
  waiter->line = line;
  changed_.NotifyAll();
  // On the request's own thread (answered while it was handed in) nothing
  // can wait: such answers are the synchronous ones, which hand over no
  // admission.
  if (waiter->handler == std::this_thread::get_id()) return;
  const auto deadline = std::chrono::steady_clock::now() + kHandoverLimit;
  while (waiter->handover == Waiter::Handover::pending) {
    if (!changed_.WaitUntil(&mutex_, deadline)) break;
  }
  const bool decided = waiter->handover != Waiter::Handover::pending;
  if (!decided) waiter->handover = Waiter::Handover::refused;  // never written now
  if (waiter->handover == Waiter::Handover::refused) {
    throw mcp::OutputClosed("the HTTP client of " + message["id"].dump() + " closed its connection first");
  }
}

}  // namespace effectfence::shared
