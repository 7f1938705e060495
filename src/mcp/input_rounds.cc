#include "mcp/input_rounds.h"

#include <algorithm>

#include "core/random_token.h"
#include "mcp/jsonrpc.h"

namespace effectfence::mcp {

void Round::attach(std::shared_ptr<McpClient::Request> request) {
  MutexLock lock(&mutex_);
  request_ = std::move(request);
}

void Round::add(ChildAsk ask) {
  std::shared_ptr<McpClient::Request> request;
  {
    MutexLock lock(&mutex_);
    asks_.push_back(std::move(ask));
    request = request_;
  }
  if (request) request->wake();  // else it is seen before the first wait
}

McpClient::Request& Round::request() const {
  MutexLock lock(&mutex_);
  return *request_;
}

std::vector<ChildAsk> Round::take() {
  MutexLock lock(&mutex_);
  std::vector<ChildAsk> taken;
  taken.swap(asks_);
  return taken;
}

bool Round::has_asks() const {
  MutexLock lock(&mutex_);
  return !asks_.empty();
}

std::shared_ptr<Round> InputRounds::begin() {
  auto round = std::make_shared<Round>();
  MutexLock lock(&mutex_);
  running_.push_back(round);
  return round;
}

void InputRounds::forget(const std::shared_ptr<Round>& round) {
  if (!round) return;
  {
    MutexLock lock(&mutex_);
    running_.erase(std::remove(running_.begin(), running_.end(), round), running_.end());
  }
  // A question that came with the call's answer has no one left to ask.
  for (ChildAsk& ask : round->take()) {
    ask.respond(Reply::failure(jsonrpc::kInternalError, "the call this " + ask.method + " belongs to has finished"));
  }
}

Status InputRounds::route(ChildAsk& ask) {
  std::shared_ptr<Round> round;
  {
    MutexLock lock(&mutex_);
    if (running_.empty()) return Status::Error("no call of the agent is running on the child");
    if (running_.size() > 1) {
      return Status::Error(std::to_string(running_.size()) +
                           " calls of the agent are running on the child, and a 2025 server's request does not say "
                           "which call it belongs to");
    }
    round = running_.front();
  }
  round->add(std::move(ask));
  return Status::Ok();
}

Json InputRounds::park(ParkedCall call, std::vector<ChildAsk> asks) {
  // Unguessable, so a retry cannot take over another call's rounds.
  std::string state = random_token_hex(16);
  if (state.empty()) state = "unavailable";  // resume() then finds nothing to take over
  Json requests = Json::object();
  MutexLock lock(&mutex_);
  for (ChildAsk& ask : asks) {
    const std::string key = "ask-" + std::to_string(next_key_++);
    requests[key] = Json{{"method", ask.method}, {"params", ask.params}};
    call.asks.emplace(key, std::move(ask));
  }
  // Questions asked in an earlier round and still unanswered are asked again.
  for (const auto& [key, ask] : call.asks) {
    if (!requests.contains(key)) requests[key] = Json{{"method", ask.method}, {"params", ask.params}};
  }
  call.since = Clock::now();
  parked_.emplace(state, std::move(call));
  return Json{{"resultType", "input_required"}, {"inputRequests", std::move(requests)}, {"requestState", state}};
}

void InputRounds::repark(const std::string& state, ParkedCall call) {
  MutexLock lock(&mutex_);
  parked_.emplace(state, std::move(call));
}

std::optional<ParkedCall> InputRounds::resume(const std::string& state) {
  MutexLock lock(&mutex_);
  auto it = parked_.find(state);
  if (it == parked_.end()) return std::nullopt;
  ParkedCall call = std::move(it->second);
  parked_.erase(it);
  return call;
}

std::vector<ParkedCall> InputRounds::expire(Clock::time_point cutoff) {
  std::vector<ParkedCall> expired;
  MutexLock lock(&mutex_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->second.since <= cutoff) {
      expired.push_back(std::move(it->second));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::vector<ParkedCall> InputRounds::take_all() { return expire(Clock::time_point::max()); }

std::vector<Ticket> InputRounds::parked_tickets() const {
  std::vector<Ticket> tickets;
  MutexLock lock(&mutex_);
  for (const auto& [state, call] : parked_) {
    if (call.ticket) tickets.push_back(*call.ticket);
  }
  return tickets;
}

void answer_asks(ParkedCall& call, const Json& input_responses) {
  if (!input_responses.is_object()) return;
  for (auto it = call.asks.begin(); it != call.asks.end();) {
    const auto answer = input_responses.find(it->first);
    if (answer == input_responses.end() || !answer->is_object()) {
      ++it;
      continue;
    }
    it->second.respond(Reply::of(*answer));
    it = call.asks.erase(it);
  }
}

}  // namespace effectfence::mcp
