// The fencing proxy behind `effectfence wrap`: mirrors a child MCP server's
// tools and puts every side-effecting call through the fence.
//
//   first call      prepare -> admitted -> forward -> commit (certificate) -> the child's result
//   identical later prepare -> replayed -> the recorded result; the child is not called
//   identical now   prepare -> refused in_flight -> isError result (or wait and replay, --wait-secs)
//   tool error      abort (failed, fenced) by default; or abort + audited clear (release)
//   child dies      fenced as unknown; the child is restarted for the next call
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "effectfence/fence.h"
#include "mcp/input_rounds.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/upstream.h"

namespace effectfence::mcp {

// Which mirrored tools are fenced.
struct FencePolicy {
  bool fence_all = false;        // also fence tools annotated readOnlyHint: true
  std::set<std::string> only;    // when not empty: exactly these are fenced
  std::set<std::string> except;  // never fenced
};

// Returns true iff calls of the tools/list entry go through the fence.
bool is_fenced(const FencePolicy& policy, const Json& tool_entry);
// A warning naming the tools --only or --except lists that none of the
// entries is (a typo in --only fences nothing by that name), or "".
std::string policy_names_not_offered(const FencePolicy& policy, const std::vector<Json>& tool_entries);

// What to do when the child answers a fenced call with isError: true.
enum class OnToolError {
  fence,    // record it and fence the intent as failed: the effect may have partly happened
  release,  // record it, then clear the intent (audited) so an identical retry runs again
};

struct ProxyOptions {
  FencePolicy policy;
  // An argument whose string value is the agent's idempotency key; "" for none.
  std::string key_arg;
  OnToolError on_tool_error = OnToolError::fence;
  // How long an identical call waits for a running one's outcome; 0: refuse at once.
  std::chrono::milliseconds wait{0};
  // Named in messages about fenced intents, e.g. "--db /path/ledger.sqlite".
  std::string ledger_option;
  // How long a call answered input_required (a stateless agent's) waits for
  // the agent's retry before the child's questions are answered with an
  // error and the call is finished without it.
  std::chrono::milliseconds input_wait{600'000};
};

// The intent and domain of one call.
struct CallIdentity {
  std::string intent;  // wrap:<tool>:<sha256 of canonical {tool, args}>, or wrap:<tool>:<agent's key>
  std::string domain;  // tool:<tool>
  bool keyed = false;  // the agent supplied the key
  static std::string domain_of(const std::string& tool) { return "tool:" + tool; }
};

// Derives the identity of a call from the tool, its arguments and the
// request's _meta (idempotencyKey), or an argument named key_arg. Returns
// the error iff a supplied key is not a non-empty string, or the arguments
// cannot be canonicalized.
StatusOr<CallIdentity> identify_call(const std::string& tool, const Json& arguments, const Json& meta,
                                     const std::string& key_arg);

// The tool result an agent gets for a refused call: isError, a text that
// says what happened and what to do, and the fence's account in
// _meta.effectfence.
Json refusal_result(const std::string& tool, const CallIdentity& identity, const Refusal& refusal,
                    const std::string& ledger_option);

// result with _meta.effectfence set to note (other _meta keys kept).
Json with_fence_note(Json result, Json note);
// The same for a result relayed as the child wrote it (sent, a raw_json
// node): its text with only that member added or replaced, every other
// byte kept. With sent null, with_fence_note(result, note).
Json with_fence_note(const Json& result, const Json& sent, const Json& note);

class Proxy {
 public:
  // Nothing runs until start().
  Proxy(Fence& fence, Launcher launcher, Logger& log, ProxyOptions options, RestartPolicy restarts = {});
  // Stops the refresher and the child.
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Starts the child (offering it the client capabilities the agent
  // declared in on_initialize, if that came first) and reads its tools.
  // Returns the error if it cannot. Once it has succeeded, later calls do
  // nothing.
  Status start();
  // The child's initialize result (serverInfo, capabilities, instructions).
  Json child_info() const;
  // The capabilities to offer agents: tools (with listChanged) and what the
  // child offers that is passed through (logging, resources, prompts, completions).
  Json capabilities() const;
  // The mirrored tools, each calling call().
  std::vector<Tool> tools();
  // Lets the proxy update the server's tool list and send it
  // notifications; nullptr detaches (before the server goes away).
  void attach(Server* server);

  // A tools/call of a mirrored tool.
  Reply call(const std::string& tool, const Json& arguments, CallContext& context);
  // A request the server does not implement: passed to the child when it
  // offers the capability, else -32601.
  Reply forward_request(const std::string& method, const Json& params);
  // initialize's params: the agent's name is recorded as the prepares'
  // agent, and its roots, sampling and elicitation capabilities are what
  // the child is offered (each restarted child too).
  void on_initialize(const Json& params);
  // The agent speaks 2026-07-28 (stateless): what the child asks it mid-call
  // goes to it within the call's answer (input_required), not as requests.
  void on_stateless_agent() { agent_stateless_ = true; }
  // A notification from the agent: notifications/roots/list_changed goes
  // on to the live child; the rest concern wrap alone.
  void on_agent_notification(const std::string& method, const Json& params);
  // Stops the child (shutdown). Calls fail from then on.
  void stop();
  // Stops the child at once, failing the calls it is running (fenced as
  // unknown: they may have had their effect).
  void stop_child_now() {
    stop_waiting();
    upstream_.stop_now();
  }
  // Identical calls waiting for a running one (--wait-secs) stop waiting and
  // get its in_flight refusal now: on shutdown, nothing they could start is
  // worth waiting an hour for.
  void stop_waiting() { waiting_stopped_ = true; }

 private:
  struct Mirror {
    std::vector<Json> entries;
    std::vector<Json> sent_entries;  // as the child wrote them (raw_json): what the agent is shown
    std::map<std::string, bool> fenced;
    uint64_t generation = 0;  // of the child whose list this is
  };

  Reply forward_call(const std::string& tool, const Json& arguments, CallContext& context);
  Reply fenced_call(const std::string& tool, const Json& arguments, CallContext& context);
  // What the ledger answers for this call with no child to run it: a replay
  // or a refusal of a fenced intent; nullopt when it would be admitted.
  std::optional<Reply> answer_without_child(const std::string& tool, const PrepareRequest& request,
                                            const CallIdentity& identity);
  Reply replay_reply(const std::string& tool, const CallIdentity& identity, const Certificate& cert);
  // Runs an admitted call on the child and records its outcome. Whatever
  // goes wrong on the way (a throw included), the ticket does not stay held
  // with no answer coming: it is fenced unknown.
  Reply run_admitted(const std::string& tool, const Json& arguments, const CallIdentity& identity,
                     const Ticket& ticket, const std::shared_ptr<Upstream::Session>& session, CallContext& context);
  Reply run_admitted_unguarded(const std::string& tool, const Json& arguments, const CallIdentity& identity,
                               const Ticket& ticket, const std::shared_ptr<Upstream::Session>& session,
                               CallContext& context);
  // Runs fn, which holds ticket; whatever goes wrong in it (a throw), the
  // ticket does not stay held with no answer coming: it is fenced unknown.
  Reply guard_admitted(const std::string& tool, const CallIdentity& identity, const Ticket& ticket,
                       const std::function<Reply()>& fn);
  // What the child's reply (nullopt: the agent cancelled) to an admitted
  // call means: recorded, fenced, released.
  Reply settle_admitted(const std::string& tool, const CallIdentity& identity, const Ticket& ticket,
                        const std::shared_ptr<Upstream::Session>& session, std::optional<ClientReply> reply);
  Reply settle_forwarded(const std::string& tool, std::optional<ClientReply> reply);
  // Waits for the child's reply to request, heartbeating ticket. nullopt when
  // the agent cancelled, or (with round) when the child asked the agent
  // something meanwhile: *asked is then true.
  std::optional<ClientReply> await_reply(McpClient::Request& request, const Ticket* ticket, CallContext& context,
                                         McpClient& client, Round* round = nullptr, bool* asked = nullptr);
  // Multi round-trip requests (input_rounds.h): a stateless agent's call
  // whose child asked it something is answered input_required and parked;
  // the agent's retry continues it.
  bool is_stateless_call(const CallContext& context) const;
  // A stateless child's input_required for a 2025 agent: each question goes
  // to the agent as the request a 2025 server would send, and the call goes
  // to the child again with the answers, round after round, under one
  // admission. Returns the child's last reply; *gave_up says why it stopped
  // early (the agent could not answer), when it did.
  std::optional<ClientReply> answer_child_rounds(const std::string& tool, const Json& arguments, CallContext& context,
                                                 const std::shared_ptr<Upstream::Session>& session,
                                                 const Ticket* ticket, std::optional<ClientReply> reply,
                                                 std::string* gave_up);
  // Asks the agent one question (method, params), waiting for its answer
  // while ticket's lease is kept; the agent's error, or one of ours.
  Reply ask_agent_now(const std::string& method, const Json& params, CallContext& context, const Ticket* ticket)
      EXCLUDES(mutex_, server_mutex_);
  Reply park(ParkedCall call);
  Reply continue_call(const std::string& state, ParkedCall call, const std::string& tool, const Json& arguments,
                      CallContext& context);
  // Keeps parked calls' leases, and finishes those the agent never came
  // back for.
  void keep_parked_calls() EXCLUDES(mutex_);
  // sent: the result as the child wrote it (raw_json), relayed with the note.
  Reply record_result(const std::string& tool, const CallIdentity& identity, const Ticket& ticket, Json result,
                      const Json& sent);
  Reply record_tool_error(const std::string& tool, const CallIdentity& identity, const Ticket& ticket, Json result,
                          const Json& sent);
  void release(const Ticket& ticket, const std::string& why);
  Json params_for_child(const std::string& tool, const Json& arguments, const CallContext& context) const;
  McpClient::ProgressSink progress_sink(const CallContext& context);
  std::string agent() const;

  void on_child_notification(const std::string& method, const Json& params, const Json& sent_params);
  // A request from the child (roots/list, sampling/createMessage, ...):
  // relayed to the agent if it declared the capability, else -32601.
  void on_child_request(const Json& child_id, const std::string& method, const Json& params, const Json& sent_params,
                        std::function<void(Reply)> respond);
  // A stateless agent's share of on_child_request.
  void ask_stateless_agent(const std::string& method, const Json& params, const Json& sent_params,
                           std::function<void(Reply)> respond);
  // Relayed requests, by the child's id: an answer forgets one; the child's
  // cancellation, or its death, cancels it at the agent.
  void forget_relayed(const std::string& child_key) EXCLUDES(relayed_mutex_);
  void cancel_relayed(const Json& child_id, const std::string& reason) EXCLUDES(mutex_, server_mutex_, relayed_mutex_);
  void cancel_all_relayed(const std::string& reason) EXCLUDES(mutex_, server_mutex_, relayed_mutex_);
  void on_child_death(uint64_t generation, const std::string& why);
  void install_mirror(const std::vector<Json>& entries, const std::vector<Json>& sent_entries, uint64_t generation)
      EXCLUDES(mutex_);
  // Makes the mirror the list of the child that session is, if it is not
  // yet (a child restarted by a call, after its backoff), and announces a
  // changed list.
  void adopt_tools_of(const Upstream::Session& session) EXCLUDES(mutex_);
  // Whether the mirror fences tool now (a tool it does not hold: yes).
  bool is_fenced_now(const std::string& tool) EXCLUDES(mutex_);
  // Whether the mirror holds tool: the child it was read from offers it.
  bool offers_tool(const std::string& tool) EXCLUDES(mutex_);
  // Publishes the mirror's tools to the agent's server, announcing them.
  void announce_mirror() EXCLUDES(mutex_, server_mutex_);
  bool stays_fenced(const std::string& tool) EXCLUDES(mutex_);
  void refresh_loop();
  // Reads the child's tools again; installs them and tells the agent if
  // they changed, or if announce (the child said they did).
  void refresh_mirror(bool announce) EXCLUDES(mutex_);
  void notify_agent(const std::string& method, const Json& params) EXCLUDES(mutex_, server_mutex_);

  Fence& fence_;
  Logger& log_;
  const ProxyOptions options_;
  Upstream upstream_;

  mutable Mutex mutex_;
  CondVar refresh_wanted_;
  Mirror mirror_ GUARDED_BY(mutex_);
  Json child_info_ GUARDED_BY(mutex_);
  // Held while writing to the agent, so kept apart from mutex_: the helpers
  // that take it are declared EXCLUDES(mutex_, server_mutex_).
  Mutex server_mutex_;
  Mutex relayed_mutex_ ACQUIRED_AFTER(server_mutex_);
  // The child's request id (dump) -> wrap's id at the agent.
  std::map<std::string, Json> relayed_ GUARDED_BY(relayed_mutex_);
  Server* server_ GUARDED_BY(server_mutex_) = nullptr;
  std::string agent_ GUARDED_BY(mutex_) = "wrap";
  // The protocol revision the agent was answered with, and the roots,
  // sampling and elicitation it declared: what the child is offered.
  ClientOffer agent_offer_ GUARDED_BY(mutex_);
  // Read-only tools stays_fenced() kept fenced, warned about once.
  std::set<std::string> kept_fenced_ GUARDED_BY(mutex_);
  bool started_ GUARDED_BY(mutex_) = false;  // start() succeeded
  bool refresh_pending_ GUARDED_BY(mutex_) = false;
  bool child_said_changed_ GUARDED_BY(mutex_) = false;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::atomic<bool> waiting_stopped_{false};
  std::atomic<bool> agent_stateless_{false};
  InputRounds rounds_;
  CondVar keeper_wanted_;  // with mutex_: stopping_
  std::thread refresher_;  // last: they use the members above
  std::thread keeper_;
};

}  // namespace effectfence::mcp
