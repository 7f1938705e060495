// Multi round-trip requests for a stateless agent (MCP 2026-07-28).
//
// A wrapped child speaks 2025 and asks its client for input in the middle
// of a call (elicitation/create, sampling/createMessage, roots/list). A
// 2026-07-28 agent takes no requests from a server: the server answers the
// call with resultType "input_required" and its questions, and the agent
// retries the call with "inputResponses" and the "requestState" it got.
//
// InputRounds keeps the calls a stateless agent has running on the child
// (a Round each) and the ones that were answered input_required and wait for
// the agent's retry (parked, by requestState). The child's call stays open
// all the while: it is one call, and one admission, over all its rounds.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "effectfence/fence.h"
#include "effectfence/json.h"
#include "mcp/client.h"
#include "mcp/upstream.h"

namespace effectfence::mcp {

// A request of the child's, to be answered by the agent.
struct ChildAsk {
  std::string method;
  Json params;  // as the child wrote them (raw_json), or parsed
  std::function<void(Reply)> respond;
};

// One call of a stateless agent that the child is running. Thread-safe.
// It is begun before the call is sent, since the child may ask before the
// send returns, and given the call's request once there is one.
class Round {
 public:
  void attach(std::shared_ptr<McpClient::Request> request) EXCLUDES(mutex_);
  // Adds a question of the child's and wakes whoever waits for the call.
  void add(ChildAsk ask) EXCLUDES(mutex_);
  // The questions asked since the last take.
  std::vector<ChildAsk> take() EXCLUDES(mutex_);
  bool has_asks() const EXCLUDES(mutex_);
  // REQUIRES: attach() was called.
  McpClient::Request& request() const EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  std::shared_ptr<McpClient::Request> request_ GUARDED_BY(mutex_);
  std::vector<ChildAsk> asks_ GUARDED_BY(mutex_);
};

// A call answered input_required, waiting for the agent's retry.
struct ParkedCall {
  using Clock = std::chrono::steady_clock;
  std::string tool;
  // The call's identity: intent and domain, and whether the agent keyed it;
  // intent is "" for a call passed through unfenced.
  std::string intent;
  std::string domain;
  bool keyed = false;
  std::optional<Ticket> ticket;  // a fenced call's admission, held over the rounds
  std::shared_ptr<Upstream::Session> session;
  std::shared_ptr<Round> round;
  std::map<std::string, ChildAsk> asks;  // by the key the agent was given
  Clock::time_point since;               // when the agent was last asked
};

class InputRounds {
 public:
  using Clock = ParkedCall::Clock;

  // Registers a call of a stateless agent, from before it is sent to the
  // child until its final answer (forget()).
  std::shared_ptr<Round> begin() EXCLUDES(mutex_);
  // Unregisters round (null: nothing); a question of its still unasked is
  // answered with an error.
  void forget(const std::shared_ptr<Round>& round) EXCLUDES(mutex_);
  // Gives a question of the child's to the call that asked it: the one call
  // of a stateless agent the child is running. Returns ok when given, else
  // why it could not be (no such call, or several: a 2025 child does not say
  // which call a request of its belongs to); ask is then left as it was.
  Status route(ChildAsk& ask) EXCLUDES(mutex_);

  // Parks call with the questions asked (taken from its round, keys given
  // here) and returns the input_required result for the agent.
  Json park(ParkedCall call, std::vector<ChildAsk> asks) EXCLUDES(mutex_);
  // Parks call again as it is, under the same requestState.
  void repark(const std::string& state, ParkedCall call) EXCLUDES(mutex_);
  // The parked call with this requestState, taken out; nullopt if none.
  std::optional<ParkedCall> resume(const std::string& state) EXCLUDES(mutex_);
  // Takes out the calls parked at or before cutoff (the agent never came back).
  std::vector<ParkedCall> expire(Clock::time_point cutoff) EXCLUDES(mutex_);
  // Takes out every parked call (wrap is stopping).
  std::vector<ParkedCall> take_all() EXCLUDES(mutex_);
  // The admissions parked calls hold, for their heartbeats.
  std::vector<Ticket> parked_tickets() const EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  std::vector<std::shared_ptr<Round>> running_ GUARDED_BY(mutex_);
  std::map<std::string, ParkedCall> parked_ GUARDED_BY(mutex_);  // by requestState
  uint64_t next_key_ GUARDED_BY(mutex_) = 1;
};

// The answers in a retry's inputResponses for call's questions: each answered
// question is answered at the child and dropped from call.asks; the ones left
// are those the agent did not answer.
void answer_asks(ParkedCall& call, const Json& input_responses);

}  // namespace effectfence::mcp
