#include "mcp/proxy.h"

#include <algorithm>
#include <future>
#include <set>
#include <variant>

#include "core/sha256.h"
#include "effectfence/refusal_text.h"
#include "fence/fence_internal.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol_era.h"
#include "mcp/raw_json.h"

namespace effectfence::mcp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After cancelling a call on the child, how long its answer may still come
// (a child that finished at that instant) before the outcome counts as unknown.
constexpr milliseconds kCancelGrace{2'000};
// How often an identical call waiting (--wait-secs) asks the ledger again.
constexpr milliseconds kWaitPollInterval{100};
// Requests other than tools/call passed to the child (resources/read, ...).
constexpr milliseconds kForwardTimeout{300'000};
// How much of a tool's error text goes into the recorded abort reason.
constexpr size_t kErrorExcerptBytes = 2'000;
constexpr const char* kReleaseOperator = "effectfence wrap";

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// The command a person runs to clear intent once they have reconciled it.
std::string clear_command(const std::string& ledger_option, const std::string& intent) {
  return "effectfence clear " + ledger_option + " " + quoted(intent) + " --reason '...'";
}

Json text_result(const std::string& text, bool is_error) {
  return Json{{"content", Json::array({Json{{"type", "text"}, {"text", text}}})}, {"isError", is_error}};
}

// The text blocks of a tool result, joined, else its JSON; cut to limit.
std::string result_excerpt(const Json& result, size_t limit = kErrorExcerptBytes) {
  std::string text;
  if (auto content = result.find("content"); content != result.end() && content->is_array()) {
    for (const Json& block : *content) {
      // The child's JSON: a "type" that is no string is no text block (value() would throw).
      const auto type = block.is_object() ? block.find("type") : block.end();
      if (block.is_object() && type != block.end() && *type == "text" && block.contains("text") &&
          block["text"].is_string()) {
        if (!text.empty()) text += " ";
        text += block["text"].get<std::string>();
      }
    }
  }
  if (text.empty()) text = jsonrpc::serialize(result);
  if (text.size() > limit) {
    // Cut on a character boundary: the excerpt goes into the ledger as text.
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return text;
}

// What the child sent, to relay as it came: its text when kept, else parsed.
Json as_sent(const Json& parsed, const Json& sent) { return sent.is_null() ? parsed : sent; }

bool is_error_result(const Json& result) {
  auto flag = result.find("isError");
  return flag != result.end() && flag->is_boolean() && flag->get<bool>();
}

// Adds name to a list of names separated by ", ", for the log.
void add_to_list(std::string* list, const std::string& name) { *list += (list->empty() ? "" : ", ") + name; }

// Errors with which a server turns a request away before acting on it.
// Not invalid params: some servers check a tool's output against its
// outputSchema after it ran and report a mismatch with that code.
// How many times a child may answer input_required in one call.
constexpr int kMaxInputRounds = 16;

bool is_input_required(const ClientReply& reply) {
  return reply.kind == ClientReply::Kind::result && reply.result.is_object() &&
         reply.result.value("resultType", Json()) == "input_required";
}

bool refused_before_running(int code) {
  return code == jsonrpc::kParseError || code == jsonrpc::kInvalidRequest || code == jsonrpc::kMethodNotFound;
}

// Client capabilities the child is offered when the agent has them: the
// child's requests for them are relayed to the agent.
constexpr const char* kRelayedClientCapabilities[] = {"roots", "sampling", "elicitation"};

// The client capability a request from the child needs, or "" if it is not relayed.
std::string client_capability_for(const std::string& method) {
  const std::string family = method.substr(0, method.find('/'));
  for (const char* relayed : kRelayedClientCapabilities) {
    if (method.size() > family.size() && family == relayed) return family;
  }
  return "";
}

// The capability a request needs from the child, or "" if it is not passed through.
std::string capability_for(const std::string& method) {
  if (method.rfind("resources/", 0) == 0) return "resources";
  if (method.rfind("prompts/", 0) == 0) return "prompts";
  if (method == "completion/complete") return "completions";
  if (method == "logging/setLevel") return "logging";
  return "";
}

// What a call gets when no child could be had to run it.
Reply not_run(const std::string& tool, const Status& why) {
  return Reply::of(text_result("The call to " + tool + " was not run: " + why.message() + ". Retry later.", true));
}

}  // namespace

bool is_fenced(const FencePolicy& policy, const Json& tool_entry) {
  const std::string name = tool_entry.value("name", "");
  if (policy.except.count(name)) return false;
  if (!policy.only.empty()) return policy.only.count(name) > 0;
  if (policy.fence_all) return true;
  const auto annotations = tool_entry.find("annotations");
  if (annotations == tool_entry.end() || !annotations->is_object()) return true;
  const auto read_only = annotations->find("readOnlyHint");
  return !(read_only != annotations->end() && read_only->is_boolean() && read_only->get<bool>());
}

std::string policy_names_not_offered(const FencePolicy& policy, const std::vector<Json>& tool_entries) {
  std::set<std::string> offered;
  for (const Json& entry : tool_entries) offered.insert(entry.value("name", ""));
  std::string warning;
  const auto name_missing = [&](const char* option, const std::set<std::string>& names) {
    std::string missing;
    for (const std::string& name : names) {
      if (!offered.count(name)) add_to_list(&missing, name);
    }
    if (missing.empty()) return;
    warning += std::string(warning.empty() ? "" : "; ") + option + " names " + missing +
               ", which the server does not offer";
  };
  name_missing("--only", policy.only);
  name_missing("--except", policy.except);
  if (warning.empty()) return "";
  std::string tools;
  for (const std::string& name : offered) add_to_list(&tools, name);
  return warning + " (a misspelt name? its tools: " + (tools.empty() ? "none" : tools) + ")";
}

StatusOr<CallIdentity> identify_call(const std::string& tool, const Json& arguments, const Json& meta,
                                     const std::string& key_arg) {
  CallIdentity identity;
  identity.domain = CallIdentity::domain_of(tool);
  std::optional<std::string> key;
  // The agent's own key first, as always: intents recorded under it must
  // keep replaying (a key argument put first would make them new actions).
  if (auto given = meta.find("idempotencyKey"); given != meta.end()) {
    if (!given->is_string() || given->get<std::string>().empty()) {
      return Status::Error("_meta.idempotencyKey must be a non-empty string");
    }
    key = given->get<std::string>();
  } else if (!key_arg.empty() && arguments.is_object() && arguments.contains(key_arg)) {
    const Json& given_arg = arguments[key_arg];
    if (!given_arg.is_string() || given_arg.get<std::string>().empty()) {
      return Status::Error("argument \"" + key_arg + "\" (the idempotency key) must be a non-empty string");
    }
    key = given_arg.get<std::string>();
  }
  if (key) {
    identity.intent = "wrap:" + tool + ":" + *key;
    identity.keyed = true;
    return identity;
  }
  const Json payload = {{"tool", tool}, {"args", arguments}};
  JsonError invalid;
  if (!validate_canonicalizable(payload, &invalid)) {
    return Status::Error("the arguments cannot be fingerprinted: " + invalid.message);
  }
  identity.intent = "wrap:" + tool + ":" + sha256_hex(canonicalize(payload));
  return identity;
}

Json refusal_result(const std::string& tool, const CallIdentity& identity, const Refusal& refusal,
                    const std::string& ledger_option) {
  const std::string call = identity.keyed ? "A call to " + tool + " with the same idempotency key"
                                          : "An identical call to " + tool;
  std::string text;
  switch (refusal.reason) {
    case Reason::in_flight:
      text = call + " is running right now" +
             (refusal.detail.contains("holder_agent") ? " (agent " + refusal.detail["holder_agent"].get<std::string>() + ")"
                                                      : std::string()) +
             ", so this one was not run. Do not retry it as a new action: retry the same call in a few seconds "
             "to get the running call's result.";
      break;
    case Reason::prior_failure:
      text = call + " failed earlier or its outcome is unknown (" +
             refusal.detail.value("recorded_reason", explain(refusal, Step::prepare)) +
             "). It was not run again, because its effect may have happened. A person must check what happened "
             "and clear it before it can run again: " + clear_command(ledger_option, identity.intent);
      break;
    case Reason::payload_mismatch:
      text = "The idempotency key of this call was already used for a different call (tool '" +
             refusal.detail.value("recorded_tool", std::string("?")) +
             "' with other arguments), so this one was not run. Use a new key for a different action.";
      break;
    case Reason::ledger_busy:
    case Reason::ledger_error:
      text = "effectfence could not record this call (" + std::string(reason_name(refusal.reason)) + ": " +
             explain(refusal, Step::prepare) + "), so it was not run. Retry in a few seconds.";
      break;
    default:
      text = "effectfence refused this call (" + std::string(reason_name(refusal.reason)) + "): " +
             explain(refusal, Step::prepare) +
             " It was not run.";
      break;
  }
  return with_fence_note(text_result(text, true), Json{{"refused", reason_name(refusal.reason)},
                                                       {"intent", identity.intent},
                                                       {"explanation", explain(refusal, Step::prepare)},
                                                       {"detail", refusal.detail}});
}

Json with_fence_note(Json result, Json note) {
  if (!result.is_object()) result = text_result(jsonrpc::serialize(result), false);
  if (!result["_meta"].is_object()) result["_meta"] = Json::object();
  result["_meta"]["effectfence"] = std::move(note);
  return result;
}

Json with_fence_note(const Json& result, const Json& sent, const Json& note) {
  if (!is_raw_json(sent)) return with_fence_note(result, note);
  const std::string text = raw_json_text(sent);
  const std::string note_text = jsonrpc::serialize(note);
  const auto meta = member_text(text, "_meta");
  const std::string new_meta = meta && is_object_text(*meta) ? with_member_text(*meta, "effectfence", note_text)
                                                             : "{\"effectfence\":" + note_text + "}";
  return raw_json(with_member_text(text, "_meta", new_meta));
}

Proxy::Proxy(Fence& fence, Launcher launcher, Logger& log, ProxyOptions options, RestartPolicy restarts)
    : fence_(fence),
      log_(log),
      options_(std::move(options)),
      upstream_(std::move(launcher), Json{{"name", "effectfence-wrap"}, {"version", "0.1.0"}}, log,
                Upstream::Events{[this](const std::string& m, const Json& p, const Json& sent) {
                                   on_child_notification(m, p, sent);
                                 },
                                 [this](uint64_t g, const std::string& why) { on_child_death(g, why); },
                                 [this](const Json& id, const std::string& m, const Json& p, const Json& sent,
                                        std::function<void(Reply)> respond) {
                                   on_child_request(id, m, p, sent, std::move(respond));
                                 }},
                restarts),
      refresher_([this] { refresh_loop(); }),
      keeper_([this] { keep_parked_calls(); }) {}

Proxy::~Proxy() { stop(); }

Status Proxy::start() {
  ClientOffer offer;
  {
    MutexLock lock(&mutex_);
    if (started_) return Status::Ok();
    offer = agent_offer_;
  }
  if (Status started = upstream_.start(offer); !started.ok()) return started;
  auto acquired = upstream_.acquire();
  if (!acquired.ok()) return acquired.status();
  const std::shared_ptr<Upstream::Session>& session = *acquired;
  install_mirror(session->tools, session->sent_tools, session->generation);
  MutexLock lock(&mutex_);
  child_info_ = session->initialize_result;
  started_ = true;
  return Status::Ok();
}

Json Proxy::child_info() const {
  MutexLock lock(&mutex_);
  return child_info_;
}

Json Proxy::capabilities() const {
  const Json offered = child_info().value("capabilities", Json::object());
  Json capabilities = {{"tools", {{"listChanged", true}}}};
  for (const char* passed : {"logging", "resources", "prompts", "completions"}) {
    if (offered.contains(passed) && offered[passed].is_object()) capabilities[passed] = offered[passed];
  }
  return capabilities;
}

std::vector<Tool> Proxy::tools() {
  std::vector<Json> entries;
  std::vector<Json> sent_entries;
  {
    MutexLock lock(&mutex_);
    entries = mirror_.entries;
    sent_entries = mirror_.sent_entries;
  }
  std::vector<Tool> tools;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Json& entry = entries[i];
    Tool tool;
    tool.name = entry["name"].get<std::string>();
    tool.input_schema = entry.value("inputSchema", Json::object());
    tool.check_arguments = false;  // the child judges its own arguments
    tool.listing_entry = i < sent_entries.size() ? sent_entries[i] : entry;  // as the child wrote it
    tool.contextual_handler = [this, name = tool.name](const Json& arguments, CallContext& context) {
      return call(name, arguments, context);
    };
    tools.push_back(std::move(tool));
  }
  return tools;
}

void Proxy::attach(Server* server) {
  MutexLock lock(&server_mutex_);
  server_ = server;
}

void Proxy::on_initialize(const Json& params) {
  Json offered = Json::object();
  if (const auto declared = params.find("capabilities"); declared != params.end() && declared->is_object()) {
    for (const char* relayed : kRelayedClientCapabilities) {
      if (auto it = declared->find(relayed); it != declared->end()) offered[relayed] = *it;
    }
  }
  // The revision the agent is answered with is offered to the child, so a
  // child that speaks it sends back what the agent expects (an older child
  // answers with its own, and is used as it is).
  const auto requested = params.find("protocolVersion");
  std::string version = requested != params.end() && requested->is_string()
                            ? negotiate_protocol_version(requested->get<std::string>())
                            : "";
  {
    MutexLock lock(&mutex_);
    agent_offer_ = ClientOffer{std::move(version), std::move(offered)};
  }
  const auto info = params.find("clientInfo");
  if (info == params.end() || !info->is_object()) return;
  const auto name = info->find("name");
  if (name == info->end() || !name->is_string() || name->get<std::string>().empty()) return;
  MutexLock lock(&mutex_);
  agent_ = name->get<std::string>();
}

std::string Proxy::agent() const {
  MutexLock lock(&mutex_);
  return agent_;
}

// A tool that turns read-only (readOnlyHint: true) after it was fenced, in
// this session or by an earlier one whose intents the ledger holds, says
// so about itself only: its recorded effects and its calls in flight are
// real. It stays fenced unless the operator names it (--except, --only).
bool Proxy::stays_fenced(const std::string& tool) {
  if (options_.policy.except.count(tool) || !options_.policy.only.empty()) return false;
  bool fenced_before = false;
  {
    MutexLock lock(&mutex_);
    const auto it = mirror_.fenced.find(tool);
    fenced_before = it != mirror_.fenced.end() && it->second;
  }
  std::string why = "it was fenced in this session";
  if (!fenced_before) {
    const auto status = fence_.domain_status(CallIdentity::domain_of(tool));
    const auto* domain = std::get_if<DomainStatus>(&status);
    fenced_before = !domain || domain->exists;  // a failed read: the safe side
    why = domain ? "the ledger holds intents of it" : "the ledger could not be read to tell whether it was fenced";
  }
  if (!fenced_before) return false;
  bool first_time = false;
  {
    MutexLock lock(&mutex_);
    first_time = kept_fenced_.insert(tool).second;
  }
  if (first_time) {
    log_.warn("tool " + tool + " declares readOnlyHint: true, but " + why + ": it stays fenced (pass --except " +
              tool + " to pass it through)");
  }
  return true;
}

void Proxy::install_mirror(const std::vector<Json>& entries, const std::vector<Json>& sent_entries,
                           uint64_t generation) {
  Mirror mirror;
  mirror.entries = entries;
  mirror.sent_entries = sent_entries;
  mirror.generation = generation;
  for (const Json& entry : entries) {
    const std::string name = entry["name"].get<std::string>();
    mirror.fenced[name] = is_fenced(options_.policy, entry) || stays_fenced(name);
  }
  std::string fenced, passed;
  for (const auto& [name, is_fenced_tool] : mirror.fenced) add_to_list(is_fenced_tool ? &fenced : &passed, name);
  log_.info("mirroring " + std::to_string(entries.size()) + " tool(s); fenced: " + (fenced.empty() ? "none" : fenced) +
            "; passed through: " + (passed.empty() ? "none" : passed));
  if (const std::string warning = policy_names_not_offered(options_.policy, entries); !warning.empty()) {
    log_.warn(warning);
  }
  MutexLock lock(&mutex_);
  mirror_ = std::move(mirror);
}

bool Proxy::is_fenced_now(const std::string& tool) {
  MutexLock lock(&mutex_);
  const auto it = mirror_.fenced.find(tool);
  return it == mirror_.fenced.end() || it->second;  // a tool missing from the mirror is fenced: the safe side
}

bool Proxy::offers_tool(const std::string& tool) {
  MutexLock lock(&mutex_);
  return mirror_.fenced.count(tool) > 0;
}

Reply Proxy::call(const std::string& tool, const Json& arguments, CallContext& context) {
  // A retry of a call answered input_required continues that call. One
  // whose requestState is unknown (finished meanwhile, or from an earlier
  // wrap) is a call like any other: the fence answers it.
  if (const std::string state = context.request_state(); !state.empty()) {
    if (std::optional<ParkedCall> parked = rounds_.resume(state)) {
      return continue_call(state, std::move(*parked), tool, arguments, context);
    }
  }
  return is_fenced_now(tool) ? fenced_call(tool, arguments, context) : forward_call(tool, arguments, context);
}

Json Proxy::params_for_child(const std::string& tool, const Json& arguments, const CallContext& context) const {
  if (is_raw_json(context.sent_params())) {
    // The agent's params as it wrote them. A progress token the client can
    // use is replaced by the client's own in place; one it cannot is not
    // passed on (the child's progress for it would reach no one).
    const std::string text = raw_json_text(context.sent_params());
    const auto meta = member_text(text, "_meta");
    if (!meta || !is_object_text(*meta) || !member_text(*meta, "progressToken")) return context.sent_params();
    const auto token = context.meta().find("progressToken");
    if (token != context.meta().end() && jsonrpc::is_valid_id(*token)) return context.sent_params();
    return raw_json(with_member_text(text, "_meta", without_member_text(*meta, "progressToken")));
  }
  Json params = {{"name", tool}, {"arguments", arguments}};
  Json meta = context.meta();
  meta.erase("progressToken");  // the client puts its own in, if the agent asked for progress
  if (!meta.empty()) params["_meta"] = std::move(meta);
  return params;
}

McpClient::ProgressSink Proxy::progress_sink(const CallContext& context) {
  const auto token = context.meta().find("progressToken");
  if (token == context.meta().end() || !jsonrpc::is_valid_id(*token)) return nullptr;
  return [this, agent_token = *token](const Json& params, const Json& sent_params) {
    if (is_raw_json(sent_params)) {
      // The child's text, with the agent's token where the client's stood.
      notify_agent("notifications/progress",
                   raw_json(with_member_text(raw_json_text(sent_params), "progressToken",
                                             jsonrpc::serialize(agent_token))));
      return;
    }
    Json translated = params;
    translated["progressToken"] = agent_token;
    notify_agent("notifications/progress", translated);
  };
}

std::optional<ClientReply> Proxy::await_reply(McpClient::Request& request, const Ticket* ticket, CallContext& context,
                                              McpClient& client, Round* round, bool* asked) {
  // Heartbeat about every third of the lease, so a tool slower than the
  // lease is never taken over while it runs.
  const milliseconds beat{std::max<int64_t>(fence_.settings().lease_ttl_ms / 3, 50)};
  std::optional<Clock::time_point> cancelled_at;
  for (;;) {
    if (!cancelled_at && round && round->has_asks()) {
      *asked = true;
      return std::nullopt;
    }
    if (auto reply = request.wait_for(cancelled_at ? std::min(beat, kCancelGrace) : beat)) return reply;
    if (!cancelled_at && context.cancelled()) cancelled_at = Clock::now();
    if (cancelled_at && Clock::now() - *cancelled_at >= kCancelGrace) {
      client.abandon(request);
      // An answer that came in just before it was abandoned still counts.
      return request.wait_for(milliseconds(0));
    }
    if (ticket) {
      if (const auto beat = fence_.heartbeat(*ticket); const Refusal* lost = refusal_of(beat)) {
        log_.error("could not extend the lease of " + ticket->intent + " (" + reason_name(lost->reason) +
                   "): " + explain(*lost, Step::heartbeat));
      }
    }
  }
}

Reply Proxy::forward_call(const std::string& tool, const Json& arguments, CallContext& context) {
  auto acquired = upstream_.acquire();
  if (!acquired.ok()) {
    return not_run(tool, acquired.status());
  }
  std::shared_ptr<Upstream::Session> session = std::move(*acquired);
  // Passed through on the word of the mirror when the call came in: the
  // child it goes to may be a restarted one (mirrored since, by this call or
  // another) that declares the tool otherwise, or does not offer it at all.
  adopt_tools_of(*session);
  if (is_fenced_now(tool)) return fenced_call(tool, arguments, context);
  std::shared_ptr<Round> round = is_stateless_call(context) ? rounds_.begin() : nullptr;
  auto request = session->client().send("tools/call", params_for_child(tool, arguments, context), progress_sink(context));
  if (round) round->attach(request);
  context.on_cancel([session, request] {
    session->client().cancel(*request, "cancelled by the agent");
    request->wake();  // stop waiting a whole heartbeat interval: the grace starts now
  });
  bool asked = false;
  auto reply = await_reply(*request, nullptr, context, session->client(), round.get(), &asked);
  if (asked) {
    ParkedCall call;
    call.tool = tool;
    call.session = session;
    call.round = std::move(round);
    return park(std::move(call));
  }
  rounds_.forget(round);
  if (reply && is_input_required(*reply) && !is_stateless_call(context)) {
    std::string gave_up;
    reply = answer_child_rounds(tool, arguments, context, session, nullptr, std::move(reply), &gave_up);
    if (!gave_up.empty()) return Reply::of(text_result("The call to " + tool + " was not finished: " + gave_up, true));
  }
  return settle_forwarded(tool, std::move(reply));
}

Reply Proxy::settle_forwarded(const std::string& tool, std::optional<ClientReply> reply) {
  if (!reply) return Reply::failure(jsonrpc::kInternalError, "cancelled");  // not sent: the call was cancelled
  switch (reply->kind) {
    case ClientReply::Kind::result: return Reply::of(as_sent(reply->result, reply->sent_result));
    case ClientReply::Kind::error: return Reply::failure(reply->error.code, reply->error.message, reply->error.data);
    default:
      return Reply::of(text_result("The call to " + tool + " failed: the child server gave " + describe_reply(*reply) +
                                       ". It is restarted for the next call.",
                                   true));
  }
}

Reply Proxy::fenced_call(const std::string& tool, const Json& arguments, CallContext& context) {
  auto identity = identify_call(tool, arguments, context.meta(), options_.key_arg);
  if (!identity.ok()) {
    return Reply::failure(jsonrpc::kInvalidParams,
                          "invalid arguments for " + tool + ": " + identity.status().message());
  }
  PrepareRequest request;
  request.intent = identity->intent;
  request.domain = identity->domain;
  request.tool = tool;
  request.args = arguments;
  request.agent = agent();

  const auto deadline = Clock::now() + options_.wait;
  bool waiting = false;
  for (;;) {
    // The child is acquired before the admission: an admission is only ever
    // sent to a child whose death, if it comes, will fence it. Starting one
    // can take a whole handshake, or be put off by a backoff; what the
    // ledger answers alone (a replay, a fenced intent) does not wait for it,
    // and nothing is admitted while there is no child to send it to.
    if (!upstream_.has_live_child()) {
      if (auto answered = answer_without_child(tool, request, *identity)) return *answered;
    }
    auto acquired = upstream_.acquire();
    if (!acquired.ok()) {
      return not_run(tool, acquired.status());
    }
    std::shared_ptr<Upstream::Session> session = std::move(*acquired);
    adopt_tools_of(*session);  // fenced either way; the agent sees the new child's list
    // Asked for on an older child's list: a tool the child no longer offers
    // is refused before anything is admitted (its "unknown tool" could not
    // be told from a refusal after a run, and would fence the intent).
    if (!offers_tool(tool)) {
      return Reply::failure(jsonrpc::kInvalidParams, "unknown tool \"" + tool + "\": the child server no longer "
                                                     "offers it (it was restarted, or changed its tool list); nothing "
                                                     "was run");
    }
    PrepareOutcome outcome = fence_.prepare(request);
    if (auto* admitted = std::get_if<Admitted>(&outcome)) {
      return run_admitted(tool, arguments, *identity, admitted->ticket, session, context);
    }
    if (auto* replayed = std::get_if<Replayed>(&outcome)) return replay_reply(tool, *identity, replayed->cert);
    const Refusal& refusal = std::get<Refusal>(outcome);
    if (refusal.reason == Reason::in_flight && Clock::now() < deadline && !context.cancelled() &&
        !waiting_stopped_) {
      if (!waiting) {
        waiting = true;
        log_.info("an identical call to " + tool + " is running (" + identity->intent + "); waiting up to " +
                  std::to_string(options_.wait.count()) + " ms for its outcome");
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(kWaitPollInterval, deadline - Clock::now()));
      continue;
    }
    log_.info("refused " + tool + " (" + identity->intent + "): " + reason_name(refusal.reason));
    return Reply::of(refusal_result(tool, *identity, refusal, options_.ledger_option));
  }
}

Reply Proxy::replay_reply(const std::string& tool, const CallIdentity& identity, const Certificate& cert) {
  log_.info("replayed " + tool + " (" + identity.intent + ") from certificate " + cert.hash);
  return Reply::of(
      with_fence_note(cert.result, {{"replayed", true}, {"certificate", cert.hash}, {"intent", identity.intent}}));
}

std::optional<Reply> Proxy::answer_without_child(const std::string& tool, const PrepareRequest& request,
                                                 const CallIdentity& identity) {
  // Only where prepare cannot admit: a recorded result, or a fenced intent.
  const auto status = fence_.intent_status(request.intent);
  const auto* known = std::get_if<IntentStatus>(&status);
  if (!known || (known->state != IntentState::done && known->state != IntentState::failed &&
                 known->state != IntentState::unknown)) {
    return std::nullopt;
  }
  PrepareOutcome outcome = fence_.prepare(request);
  if (auto* replayed = std::get_if<Replayed>(&outcome)) return replay_reply(tool, identity, replayed->cert);
  if (auto* admitted = std::get_if<Admitted>(&outcome)) {
    // Swept or cleared since the look: nothing may be held without a child.
    release(admitted->ticket, "not sent to the child: it was being started");
    return std::nullopt;
  }
  const Refusal& refusal = std::get<Refusal>(outcome);
  if (refusal.reason == Reason::in_flight) return std::nullopt;  // the caller may wait for it
  log_.info("refused " + tool + " (" + identity.intent + "): " + reason_name(refusal.reason));
  return Reply::of(refusal_result(tool, identity, refusal, options_.ledger_option));
}

Reply Proxy::run_admitted(const std::string& tool, const Json& arguments, const CallIdentity& identity,
                          const Ticket& ticket, const std::shared_ptr<Upstream::Session>& session,
                          CallContext& context) {
  return guard_admitted(tool, identity, ticket,
                        [&] { return run_admitted_unguarded(tool, arguments, identity, ticket, session, context); });
}

Reply Proxy::guard_admitted(const std::string& tool, const CallIdentity& identity, const Ticket& ticket,
                            const std::function<Reply()>& fn) {
  std::string failure;
  try {
    return fn();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an unknown exception";
  }
  // The call may have run: fenced, never left to lapse and run again. A
  // ticket whose result was recorded first refuses this, and stays done.
  const std::string why = "effectfence wrap failed while handling the call (" + failure +
                          "); the child may have run it, so its effect may have happened";
  log_.error(tool + " (" + identity.intent + "): " + why);
  if (!fence_.fence_unknown(ticket, why)) log_.warn("did not fence " + ticket.intent + " as unknown (already decided?)");
  return Reply::of(with_fence_note(text_result("The call to " + tool + " may have run, but " + why +
                                                   ". Unless its result was recorded, it is fenced as unknown; a "
                                                   "person must check and clear it (" +
                                                   clear_command(options_.ledger_option, identity.intent) + ").",
                                               true),
                                   {{"fenced", "unknown"}, {"intent", identity.intent}}));
}

Reply Proxy::run_admitted_unguarded(const std::string& tool, const Json& arguments, const CallIdentity& identity,
                                    const Ticket& ticket, const std::shared_ptr<Upstream::Session>& session,
                                    CallContext& context) {
  McpClient& client = session->client();
  if (context.cancelled()) {
    // Cancelled while it was being admitted: the child never hears of it.
    release(ticket, "cancelled by the agent before it was sent to the child");
    return Reply::failure(jsonrpc::kInternalError, "cancelled");  // not sent: the call was cancelled
  }
  std::shared_ptr<Round> round = is_stateless_call(context) ? rounds_.begin() : nullptr;
  auto request = client.send("tools/call", params_for_child(tool, arguments, context), progress_sink(context));
  if (round) round->attach(request);
  if (!request->delivered()) {
    rounds_.forget(round);
    release(ticket, "never reached the child: " + describe_reply(*request->wait_for(milliseconds(0))));
    return Reply::of(text_result("The call to " + tool + " was not run: the child server is not running; it is "
                                 "restarted for the next call. Retry.", true));
  }
  context.on_cancel([session, request] {
    session->client().cancel(*request, "cancelled by the agent");
    request->wake();  // stop waiting a whole heartbeat interval: the grace starts now
  });
  bool asked = false;
  auto reply = await_reply(*request, &ticket, context, client, round.get(), &asked);
  if (asked) {
    ParkedCall call;
    call.tool = tool;
    call.intent = identity.intent;
    call.domain = identity.domain;
    call.keyed = identity.keyed;
    call.ticket = ticket;
    call.session = session;
    call.round = std::move(round);
    return park(std::move(call));
  }
  rounds_.forget(round);
  if (reply && is_input_required(*reply) && !is_stateless_call(context)) {
    std::string gave_up;
    reply = answer_child_rounds(tool, arguments, context, session, &ticket, std::move(reply), &gave_up);
    if (!gave_up.empty()) {
      // Every round before the last answer runs nothing (2026-07-28): released.
      release(ticket, "the child's questions could not be answered: " + gave_up);
      return Reply::of(with_fence_note(text_result("The call to " + tool + " was not finished, and nothing ran: " +
                                                       gave_up + ". An identical call runs again.",
                                                   true),
                                       {{"released", true}, {"intent", identity.intent}}));
    }
  }
  return settle_admitted(tool, identity, ticket, session, std::move(reply));
}

Reply Proxy::settle_admitted(const std::string& tool, const CallIdentity& identity, const Ticket& ticket,
                             const std::shared_ptr<Upstream::Session>& session, std::optional<ClientReply> reply) {
  if (!reply) {
    const std::string why = "the agent cancelled the call while the child was running it; the child was asked to "
                            "stop, but its effect may or may not have happened, and the child may still be running "
                            "it: check the provider, and that the child has finished the call, before clearing";
    if (!fence_.fence_unknown(ticket, why)) log_.error("could not fence " + ticket.intent + " as unknown");
    return Reply::failure(jsonrpc::kInternalError, "cancelled");  // not sent: the call was cancelled
  }
  switch (reply->kind) {
    case ClientReply::Kind::result:
      if (is_input_required(*reply)) {
        // A stateless child's round that asks for input has run nothing: the
        // agent's retry, with its answers, is a new round, admitted afresh.
        release(ticket, "the child asked for input (input_required); this round ran nothing");
        log_.info(tool + " (" + identity.intent + "): the child asked for input; relayed input_required, released");
        return Reply::of(as_sent(reply->result, reply->sent_result));
      }
      if (is_error_result(reply->result)) {
        return record_tool_error(tool, identity, ticket, std::move(reply->result), reply->sent_result);
      }
      return record_result(tool, identity, ticket, std::move(reply->result), reply->sent_result);
    case ClientReply::Kind::error: {
      const RpcError& e = reply->error;
      const std::string why = "the child answered with error " + std::to_string(e.code) + ": " + e.message;
      if (refused_before_running(e.code) || options_.on_tool_error == OnToolError::release) {
        release(ticket, why);
      } else if (const auto aborted = fence_.abort(ticket, why); const Refusal* r = refusal_of(aborted)) {
        log_.error("could not fence " + ticket.intent + ": " + explain(*r, Step::abort));
      }
      return Reply::failure(e.code, e.message, e.data);
    }
    case ClientReply::Kind::closed:
      // The death handler fences every admission in flight as unknown
      // before a new child starts; wait for it so the answer is true.
      upstream_.wait_death_handled(session->generation);
      return Reply::of(with_fence_note(
          text_result("The child server exited (or its connection broke) while running " + tool + ": " + reply->why +
                          ". Whether the call's effect happened is unknown, so it is fenced: identical calls are "
                          "refused until a person checks and clears it (" +
                          clear_command(options_.ledger_option, identity.intent) +
                          "). The child server is restarted for the next call.",
                      true),
          {{"fenced", "unknown"}, {"intent", identity.intent}}));
    case ClientReply::Kind::unreadable: {
      const std::string why = "the child's answer could not be read (" + reply->why + "); its effect may have happened";
      if (!fence_.fence_unknown(ticket, why)) log_.error("could not fence " + ticket.intent + " as unknown");
      return Reply::of(with_fence_note(text_result("The call to " + tool + " ran, but " + why +
                                                       ". It is fenced as unknown; a person must check and clear it "
                                                       "(" + clear_command(options_.ledger_option, identity.intent) +
                                                       ").",
                                                   true),
                                       {{"fenced", "unknown"}, {"intent", identity.intent}}));
    }
  }
  return Reply::failure(jsonrpc::kInternalError, "unreachable");
}

Reply Proxy::record_result(const std::string& tool, const CallIdentity& identity, const Ticket& ticket, Json result,
                           const Json& sent) {
  CommitOutcome committed = fence_.commit(ticket, result);
  for (int retry = 0; retry < 3; ++retry) {
    const Refusal* r = refusal_of(committed);
    if (!r || (r->reason != Reason::ledger_busy && r->reason != Reason::ledger_error)) break;
    log_.warn("recording the result of " + ticket.intent + " failed (" + explain(*r, Step::commit) + "); retrying");
    committed = fence_.commit(ticket, result);
  }
  if (auto* cert = std::get_if<Certificate>(&committed)) {
    log_.info("ran " + tool + " (" + identity.intent + "), certificate " + cert->hash);
    return Reply::of(with_fence_note(result, sent,
                                     {{"replayed", false}, {"certificate", cert->hash}, {"intent", identity.intent}}));
  }
  const Refusal& refusal = std::get<Refusal>(committed);
  log_.error("the result of " + tool + " (" + identity.intent + ") could not be recorded: " +
             reason_name(refusal.reason) + ": " + explain(refusal, Step::commit));
  if (refusal.reason != Reason::lease_lost) {
    // Unrecorded, the intent must not lapse and run again: fence it. If even
    // that fails, it stays held by this live process (identical calls are
    // refused in_flight) and is fenced unknown when wrap exits.
    // The result goes with it into the audit log, as the text it came as.
    const auto aborted =
        fence_.abort(ticket, "the tool ran but its result could not be recorded: " + explain(refusal, Step::commit), result);
    if (const Refusal* r = refusal_of(aborted)) {
      log_.error("could not fence " + ticket.intent + " either (" + explain(*r, Step::abort) + "); identical calls are refused "
                 "while this wrap runs, and it is fenced as unknown when wrap exits");
    }
  }
  const std::string explanation =
      refusal.reason == Reason::lease_lost
          ? explain(refusal, Step::commit)
          : "The tool ran and this is its result, but the ledger could not record it (" +
                std::string(reason_name(refusal.reason)) + "). Identical calls are refused, never run again, until "
                "a person checks it and clears the intent (" +
                clear_command(options_.ledger_option, identity.intent) + ").";
  return Reply::of(with_fence_note(result, sent, {{"recorded", false},
                                                       {"intent", identity.intent},
                                                       {"refused", reason_name(refusal.reason)},
                                                       {"explanation", explanation}}));
}

Reply Proxy::record_tool_error(const std::string& tool, const CallIdentity& identity, const Ticket& ticket,
                               Json result, const Json& sent) {
  const std::string why = "the tool reported an error: " + result_excerpt(result);
  if (options_.on_tool_error == OnToolError::release) {
    release(ticket, why);
    log_.info(tool + " (" + identity.intent + ") reported an error; released, an identical retry runs again");
    return Reply::of(with_fence_note(result, sent, {{"released", true}, {"intent", identity.intent}}));
  }
  if (const auto aborted = fence_.abort(ticket, why); const Refusal* r = refusal_of(aborted)) {
    log_.error("could not fence " + ticket.intent + " after a tool error: " + explain(*r, Step::abort));
  }
  log_.info(tool + " (" + identity.intent + ") reported an error; fenced as failed");
  return Reply::of(with_fence_note(result, sent, {{"fenced", "failed"}, {"intent", identity.intent}}));
}

void Proxy::release(const Ticket& ticket, const std::string& why) {
  // Abort, then an audited clear: the ledger keeps the attempt, and the
  // next identical call is admitted as a fresh attempt.
  if (const auto aborted = fence_.abort(ticket, why); const Refusal* r = refusal_of(aborted)) {
    log_.error("could not release " + ticket.intent + ": " + explain(*r, Step::abort));
    return;
  }
  if (const auto cleared = fence_.clear(ticket.intent, kReleaseOperator, "released by wrap: " + why);
      const Refusal* r = refusal_of(cleared)) {
    log_.error("could not release " + ticket.intent + " (it stays fenced as failed): " + explain(*r, Step::clear));
  }
}

Reply Proxy::forward_request(const std::string& method, const Json& params) {
  const std::string capability = capability_for(method);
  const Json offered = child_info().value("capabilities", Json::object());
  if (capability.empty() || !offered.contains(capability)) {
    return Reply::failure(jsonrpc::kMethodNotFound, "method not found: " + method);
  }
  auto acquired = upstream_.acquire();
  if (!acquired.ok()) {
    return Reply::failure(jsonrpc::kInternalError, method + " failed: " + acquired.status().message());
  }
  std::shared_ptr<Upstream::Session> session = std::move(*acquired);
  ClientReply reply = session->client().call(method, params, kForwardTimeout);
  switch (reply.kind) {
    case ClientReply::Kind::result: return Reply::of(as_sent(reply.result, reply.sent_result));
    case ClientReply::Kind::error: return Reply::failure(reply.error.code, reply.error.message, reply.error.data);
    default: return Reply::failure(jsonrpc::kInternalError, method + " failed: the child server gave " + describe_reply(reply));
  }
}

void Proxy::notify_agent(const std::string& method, const Json& params) {
  MutexLock lock(&server_mutex_);
  if (server_) server_->notify(method, params);
}

void Proxy::on_child_notification(const std::string& method, const Json& params, const Json& sent_params) {
  if (method == "notifications/tools/list_changed") {
    MutexLock lock(&mutex_);
    refresh_pending_ = true;
    child_said_changed_ = true;
    refresh_wanted_.NotifyAll();
    return;
  }
  if (method == "notifications/cancelled") {
    // About a request it sent us: a relayed one is cancelled at the agent
    // too; the rest were answered at once.
    const auto reason = params.find("reason");
    cancel_relayed(params.value("requestId", Json()),
                   reason != params.end() && reason->is_string() ? reason->get<std::string>()
                                                                 : "cancelled by the server that asked");
    return;
  }
  // Logging messages, resource and prompt changes pass through as written
  // (null: the child sent no params, and none are added).
  notify_agent(method, sent_params);
}

void Proxy::on_child_request(const Json& child_id, const std::string& method, const Json& params,
                             const Json& sent_params, std::function<void(Reply)> respond) {
  const std::string capability = client_capability_for(method);
  bool declared = false;
  if (!capability.empty()) {
    MutexLock lock(&mutex_);
    declared = agent_offer_.capabilities.contains(capability);
  }
  if (declared && agent_stateless_) {
    ask_stateless_agent(method, params, sent_params, std::move(respond));
    return;
  }
  if (declared) {
    MutexLock lock(&server_mutex_);
    if (server_) {
      // Relayed under an id of the server's own; the answer comes back by
      // callback, so no thread waits for the agent (sampling can take minutes).
      log_.debug("relaying the child's " + method + " to the agent");
      const std::string key = child_id.dump();
      const Json agent_id =
          server_->request(method, sent_params, [this, key, method, respond = std::move(respond)](Reply reply) {
            forget_relayed(key);
            if (reply.error) {
              log_.debug("the agent answered the child's " + method + " with error " +
                         std::to_string(reply.error->code));
            }
            respond(std::move(reply));
          });
      if (!agent_id.is_null()) {
        MutexLock relayed_lock(&relayed_mutex_);
        relayed_[key] = agent_id;
      }
      return;
    }
  }
  log_.info("the child asked for " + method + ", which the agent does not offer; answered -32601");
  respond(Reply::failure(jsonrpc::kMethodNotFound, "method not found: this client offers no " + method));
}

void Proxy::ask_stateless_agent(const std::string& method, const Json& params, const Json& sent_params,
                                std::function<void(Reply)> respond) {
  ChildAsk ask{method, sent_params.is_null() ? params : sent_params, std::move(respond)};
  const Status routed = rounds_.route(ask);
  if (routed.ok()) {
    log_.debug("the child asked for " + method + " during a stateless agent's call: it goes to the agent in the "
               "call's answer");
    return;
  }
  log_.info("the child asked for " + method + ", which cannot reach the agent: " + routed.message());
  ask.respond(Reply::failure(jsonrpc::kInternalError,
                             "the client speaks protocol revision 2026-07-28, which takes a server's questions only "
                             "within the answer to the call that asks them, and " + routed.message()));
}

bool Proxy::is_stateless_call(const CallContext& context) const {
  if (!agent_stateless_) return false;
  const auto version = context.meta().find(kProtocolVersionMetaKey);
  return version != context.meta().end() && version->is_string() && is_modern_version(version->get<std::string>());
}

std::optional<ClientReply> Proxy::answer_child_rounds(const std::string& tool, const Json& arguments,
                                                      CallContext& context,
                                                      const std::shared_ptr<Upstream::Session>& session,
                                                      const Ticket* ticket, std::optional<ClientReply> reply,
                                                      std::string* gave_up) {
  for (int round = 0; reply && is_input_required(*reply); ++round) {
    if (round == kMaxInputRounds) {
      *gave_up = "the child asked for input " + std::to_string(kMaxInputRounds) + " times in a row";
      return reply;
    }
    const Json asked = reply->result.value("inputRequests", Json::object());
    Json responses = Json::object();
    if (asked.is_object()) {
      for (const auto& [key, question] : asked.items()) {
        const std::string method = question.is_object() ? question.value("method", std::string()) : std::string();
        const Reply answer = ask_agent_now(method, question.is_object() ? question.value("params", Json::object())
                                                                         : Json::object(),
                                           context, ticket);
        if (answer.error) {
          *gave_up = "the agent could not answer the child's " + (method.empty() ? std::string("question") : method) +
                     " (" + std::to_string(answer.error->code) + ": " + answer.error->message + ")";
          return reply;
        }
        responses[key] = answer.result;
      }
    }
    Json params = params_for_child(tool, arguments, context);
    if (is_raw_json(params)) {
      std::string text = with_member_text(raw_json_text(params), "inputResponses", jsonrpc::serialize(responses));
      if (reply->result.contains("requestState")) {
        text = with_member_text(text, "requestState", jsonrpc::serialize(reply->result["requestState"]));
      }
      params = raw_json(text);
    } else {
      params["inputResponses"] = responses;
      if (reply->result.contains("requestState")) params["requestState"] = reply->result["requestState"];
    }
    log_.info("the agent answered the child's questions; " + tool + " is sent again with them");
    auto request = session->client().send("tools/call", params, progress_sink(context));
    context.on_cancel([session, request] {
      session->client().cancel(*request, "cancelled by the agent");
      request->wake();
    });
    reply = await_reply(*request, ticket, context, session->client());
  }
  return reply;
}

Reply Proxy::ask_agent_now(const std::string& method, const Json& params, CallContext& context, const Ticket* ticket) {
  const std::string capability = client_capability_for(method);
  bool declared = false;
  if (!capability.empty()) {
    MutexLock lock(&mutex_);
    declared = agent_offer_.capabilities.contains(capability);
  }
  if (!declared) return Reply::failure(jsonrpc::kMethodNotFound, "method not found: this client offers no " + method);
  auto answered = std::make_shared<std::promise<Reply>>();
  std::future<Reply> answer = answered->get_future();
  {
    MutexLock lock(&server_mutex_);
    if (!server_) return Reply::failure(jsonrpc::kInternalError, "the agent is gone");
    server_->request(method, params, [answered](Reply reply) { answered->set_value(std::move(reply)); });
  }
  // A person may take minutes to answer: the lease is kept meanwhile.
  const milliseconds beat{std::max<int64_t>(fence_.settings().lease_ttl_ms / 3, 50)};
  const auto deadline = Clock::now() + options_.input_wait;
  while (answer.wait_for(beat) != std::future_status::ready) {
    if (context.cancelled()) return Reply::failure(jsonrpc::kInternalError, "the call was cancelled");
    if (Clock::now() >= deadline) {
      return Reply::failure(jsonrpc::kInternalError, "no answer within " +
                                                         std::to_string(options_.input_wait.count() / 1000) + " s");
    }
    if (ticket) {
      if (const auto beat_outcome = fence_.heartbeat(*ticket); const Refusal* lost = refusal_of(beat_outcome)) {
        log_.error("could not extend the lease of " + ticket->intent + " (" + reason_name(lost->reason) +
                   "): " + explain(*lost, Step::heartbeat));
      }
    }
  }
  return answer.get();
}

Reply Proxy::park(ParkedCall call) {
  std::vector<ChildAsk> asks = call.round->take();
  std::string methods;
  for (const ChildAsk& ask : asks) methods += (methods.empty() ? "" : ", ") + ask.method;
  log_.info("the child asked the agent (" + methods + ") during " + call.tool +
            "; answered input_required, the call waits for the agent's retry");
  return Reply::of(rounds_.park(std::move(call), std::move(asks)));
}

Reply Proxy::continue_call(const std::string& state, ParkedCall call, const std::string& tool, const Json& arguments,
                           CallContext& context) {
  std::string mismatch;
  if (call.tool != tool) {
    mismatch = "it belongs to a call of " + call.tool + ", not " + tool;
  } else if (call.ticket) {
    const auto identity = identify_call(tool, arguments, context.meta(), options_.key_arg);
    if (!identity.ok() || identity->intent != call.intent) {
      mismatch = "it belongs to a call of " + tool + " with other arguments";
    }
  }
  if (!mismatch.empty()) {
    rounds_.repark(state, std::move(call));
    return Reply::failure(jsonrpc::kInvalidParams, "invalid params: requestState does not fit this call: " + mismatch +
                                                       "; a retry repeats the call it continues");
  }
  answer_asks(call, context.input_responses());
  if (!call.asks.empty()) return park(std::move(call));  // asked again: they are unanswered
  log_.info("the agent answered the child's questions; " + tool + " goes on");
  const std::shared_ptr<Upstream::Session> session = call.session;
  const std::shared_ptr<Round> round = call.round;
  context.on_cancel([session, round] {
    session->client().cancel(round->request(), "cancelled by the agent");
    round->request().wake();
  });
  const CallIdentity identity{call.intent, call.domain, call.keyed};
  auto go_on = [&]() -> Reply {
    bool asked = false;
    auto reply = await_reply(round->request(), call.ticket ? &*call.ticket : nullptr, context, session->client(),
                             round.get(), &asked);
    if (asked) return park(std::move(call));
    rounds_.forget(round);
    if (!call.ticket) return settle_forwarded(tool, std::move(reply));
    return settle_admitted(tool, identity, *call.ticket, session, std::move(reply));
  };
  if (!call.ticket) return go_on();
  const Ticket ticket = *call.ticket;
  return guard_admitted(tool, identity, ticket, go_on);
}

void Proxy::keep_parked_calls() {
  const milliseconds beat{std::max<int64_t>(fence_.settings().lease_ttl_ms / 3, 50)};
  const milliseconds tick = std::min(beat, milliseconds(1'000));
  std::vector<ParkedCall> unattended;  // given up on by the agent: finished here
  auto heartbeat = [this](const Ticket& ticket) {
    if (const auto beat = fence_.heartbeat(ticket); const Refusal* lost = refusal_of(beat)) {
      log_.error("could not extend the lease of " + ticket.intent + " (" + reason_name(lost->reason) +
                 "): " + explain(*lost, Step::heartbeat));
    }
  };
  auto give_up = [](ChildAsk& ask, const std::string& why) { ask.respond(Reply::failure(jsonrpc::kInternalError, why)); };
  auto last_beat = Clock::now();
  MutexLock lock(&mutex_);
  while (!stopping_) {
    keeper_wanted_.WaitFor(&mutex_, tick);
    if (stopping_) break;
    lock.Unlock();
    if (Clock::now() - last_beat >= beat) {
      last_beat = Clock::now();
      for (const Ticket& ticket : rounds_.parked_tickets()) heartbeat(ticket);
      for (const ParkedCall& call : unattended) {
        if (call.ticket) heartbeat(*call.ticket);
      }
    }
    const std::string late = "the agent did not answer within " +
                             std::to_string(options_.input_wait.count() / 1000) + " s (it never retried the call)";
    for (ParkedCall& call : rounds_.expire(Clock::now() - options_.input_wait)) {
      log_.warn(call.tool + " waited for the agent's answers in vain: " + late + "; the child is told so");
      for (auto& [key, ask] : call.asks) give_up(ask, late);
      call.asks.clear();
      unattended.push_back(std::move(call));
    }
    for (auto it = unattended.begin(); it != unattended.end();) {
      for (ChildAsk& ask : it->round->take()) give_up(ask, late);
      std::optional<ClientReply> reply = it->round->request().wait_for(milliseconds(0));
      if (!reply) {
        ++it;
        continue;
      }
      rounds_.forget(it->round);
      const CallIdentity identity{it->intent, it->domain, it->keyed};
      if (it->ticket) {
        guard_admitted(it->tool, identity, *it->ticket, [&] {
          return settle_admitted(it->tool, identity, *it->ticket, it->session, std::move(reply));
        });
      } else {
        settle_forwarded(it->tool, std::move(reply));
      }
      log_.info(it->tool + " finished without its agent, which will get its outcome if it calls again");
      it = unattended.erase(it);
    }
    lock.Lock();
  }
  lock.Unlock();
  // Stopping: the child goes too, which ends what it runs; the admissions
  // are fenced with the rest of this process's calls in flight.
  for (ParkedCall& call : rounds_.take_all()) {
    for (auto& [key, ask] : call.asks) give_up(ask, "effectfence wrap is stopping");
  }
  lock.Lock();
}

void Proxy::forget_relayed(const std::string& child_key) {
  MutexLock lock(&relayed_mutex_);
  relayed_.erase(child_key);
}

void Proxy::cancel_relayed(const Json& child_id, const std::string& reason) {
  Json agent_id;
  {
    MutexLock lock(&relayed_mutex_);
    auto it = relayed_.find(child_id.dump());
    if (it == relayed_.end()) return;
    agent_id = it->second;
    relayed_.erase(it);
  }
  MutexLock lock(&server_mutex_);
  if (server_) server_->cancel_request(agent_id, reason);
}

void Proxy::cancel_all_relayed(const std::string& reason) {
  std::map<std::string, Json> relayed;
  {
    MutexLock lock(&relayed_mutex_);
    relayed.swap(relayed_);
  }
  MutexLock lock(&server_mutex_);
  if (!server_) return;
  for (const auto& [child_key, agent_id] : relayed) server_->cancel_request(agent_id, reason);
}

void Proxy::on_agent_notification(const std::string& method, const Json& params) {
  if (method != "notifications/roots/list_changed") return;
  if (!upstream_.notify(method, params)) {
    log_.debug("the roots changed while no child was running; a new child asks for them itself");
  }
}

void Proxy::on_child_death(uint64_t generation, const std::string& why) {
  cancel_all_relayed("the server that asked is gone: " + why);
  // Only this child's calls can be in flight: a new child starts only after
  // this returns. So every admission this process holds was sent to it, or
  // is about to fail on its closed connection and be released.
  const int64_t fenced = FenceInternal::fence_own_in_flight(
      fence_, "the child server (start " + std::to_string(generation) + ") died while running the call: " + why);
  if (fenced > 0) {
    log_.warn("fenced " + std::to_string(fenced) + " call(s) in flight as unknown: the child server died while "
              "running them; a person must check and clear them");
  } else if (fenced < 0) {
    log_.error("could not fence the calls in flight; other processes fence them when they notice");
  }
  MutexLock lock(&mutex_);
  if (!started_) return;  // a child that died in its handshake: start() reports it
  refresh_pending_ = true;  // a restarted child may list other tools
  refresh_wanted_.NotifyAll();
}

void Proxy::refresh_loop() {
  MutexLock lock(&mutex_);
  for (;;) {
    while (!stopping_ && !refresh_pending_) refresh_wanted_.Wait(&mutex_);
    if (stopping_) return;
    refresh_pending_ = false;
    const bool announce = child_said_changed_;
    child_said_changed_ = false;
    lock.Unlock();
    refresh_mirror(announce);
    lock.Lock();
  }
}

void Proxy::refresh_mirror(bool announce) {
  std::vector<Json> sent;
  uint64_t generation = 0;
  const auto list = [&]() -> StatusOr<std::vector<Json>> {
    auto session = upstream_.acquire();
    if (!session.ok()) return session.status();
    generation = (*session)->generation;
    return upstream_.list_tools(&sent);
  };
  auto listed = list();
  if (!listed.ok()) {
    log_.warn("could not refresh the tool list: " + listed.status().message());
    return;
  }
  {
    MutexLock lock(&mutex_);
    if (*listed == mirror_.entries && sent == mirror_.sent_entries && !announce) {
      mirror_.generation = generation;
      return;
    }
  }
  install_mirror(*listed, sent, generation);
  announce_mirror();
}

void Proxy::adopt_tools_of(const Upstream::Session& session) {
  {
    MutexLock lock(&mutex_);
    if (mirror_.generation >= session.generation) return;  // this child's list, or a later one's
    if (mirror_.entries == session.tools && mirror_.sent_entries == session.sent_tools) {
      mirror_.generation = session.generation;
      return;
    }
  }
  log_.info("the child server was restarted (start " + std::to_string(session.generation) +
            ") with another tool list: mirroring it");
  install_mirror(session.tools, session.sent_tools, session.generation);
  announce_mirror();
}

void Proxy::announce_mirror() {
  std::vector<Tool> mirrored = tools();
  MutexLock lock(&server_mutex_);
  if (!server_) return;
  server_->set_tools(std::move(mirrored));
  server_->notify("notifications/tools/list_changed", nullptr);  // no params, as servers send it
}

void Proxy::stop() {
  {
    MutexLock lock(&mutex_);
    if (stopping_) return;
    stopping_ = true;
    refresh_wanted_.NotifyAll();
    keeper_wanted_.NotifyAll();
  }
  // The child first: a refresh may be waiting on a child's handshake, which
  // only its stop ends.
  upstream_.stop();
  if (refresher_.joinable()) refresher_.join();
  if (keeper_.joinable()) keeper_.join();
}

}  // namespace effectfence::mcp
