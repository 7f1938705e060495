#include "mcp/fence_tools.h"

#include <chrono>
#include <initializer_list>
#include <utility>

namespace effectfence::mcp {

const char* const kFenceInstructions =
    "effectfence makes side-effecting tool calls run exactly once across agents, retries and processes. "
    "Before a side effect (charging, paying, deploying, scaling, sending), call fence_prepare with a stable "
    "intent id for the logical action. status \"fresh\": run the tool, then call fence_commit with the "
    "prepared ticket and the tool's result (fence_abort if it failed; fence_heartbeat if it runs long). "
    "status \"already_done\": do NOT run the tool; use cert.result. isError with status \"refused\": do NOT "
    "run the tool; follow the message. Use fence_status to see an intent's state and a domain's seq for a "
    "read_set.";

namespace {

// A counter an agent may claim to have seen (the inputSchema's maximum,
// which the server checks): half of what a clock can hold, so the ticks
// after it can never saturate (a saturated counter stops ordering that
// agent's effects).
constexpr uint64_t kMaxKnownCounter = uint64_t{1} << 52;

constexpr Reason kAllReasons[] = {Reason::in_flight,        Reason::domain_race,  Reason::stale_read_set,
                                  Reason::prior_failure,    Reason::payload_mismatch, Reason::lease_lost,
                                  Reason::ticket_invalid,   Reason::invalid_request,  Reason::ledger_busy,
                                  Reason::ledger_error};

// ---- schemas ---------------------------------------------------------------

Json string_schema(const char* description) {
  return Json{{"type", "string"}, {"minLength", 1}, {"description", description}};
}

// The names an action is known by (effectfence::kMaxNameCharacters).
Json name_schema(const char* description) {
  Json schema = string_schema(description);
  schema["maxLength"] = kMaxNameCharacters;
  return schema;
}

Json reason_schema() {
  Json names = Json::array();
  for (Reason r : kAllReasons) names.push_back(reason_name(r));
  return Json{{"type", "string"},
              {"enum", names},
              {"description", "Why the call was refused (status \"refused\" only). The message says what to do."}};
}

Json ticket_schema() {
  return Json{{"type", "object"},
              {"description",
               "The admission ticket from fence_prepare's \"prepared\", passed back unchanged. The server checks "
               "it against the ledger: an edited or forged ticket is refused (ticket_invalid)."}};
}

// What fence_prepare hands out (the input side stays an untyped object: any
// ticket that is not exactly what the ledger issued is refused as
// ticket_invalid, whatever is wrong with it).
Json issued_ticket_schema() {
  const Json text = {{"type", "string"}};
  const Json count = {{"type", "integer"}, {"minimum", 0}};
  Json schema = ticket_schema();
  schema["required"] = {"intent", "domain", "seq", "generation", "token", "lease_expires_at_ms"};
  schema["properties"] = {{"intent", text},
                          {"domain", text},
                          {"seq", count},
                          {"generation", count},
                          {"token", text},
                          {"lease_expires_at_ms",
                           {{"type", "integer"}, {"description", "When the lease lapses, in ms since the epoch"}}}};
  return schema;
}

Json certificate_schema() {
  const Json text = {{"type", "string"}};
  const Json count = {{"type", "integer"}, {"minimum", 0}};
  return Json{
      {"type", "object"},
      {"description", "The content-addressed record of an effect that ran; result is what its tool returned"},
      {"required", {"intent", "domain", "seq", "generation", "tool", "args", "result", "agent", "hash"}},
      {"properties",
       {{"hash", {{"type", "string"}, {"description", "SHA-256 over the canonical JSON of the other fields"}}},
        {"intent", text},
        {"parent", {{"type", {"string", "null"}}, {"description", "Hash of the certificate this effect built on"}}},
        {"domain", text},
        {"seq", count},
        {"generation", count},
        {"tool", text},
        {"args", {{"description", "The arguments the tool ran with"}}},
        {"result", {{"description", "The recorded result of the effect"}}},
        {"vector_clock", {{"type", "object"}}},
        {"read_set", {{"type", "array"}}},
        {"agent", text}}}};
}

Json counters_schema(const char* description) {
  Json count = {{"type", "integer"}, {"minimum", 0}};
  Json refused = {{"type", "object"}, {"properties", Json::object()}};
  for (const char* name : {"stale_read_set", "domain_race", "in_flight", "prior_failure", "payload_mismatch"}) {
    refused["properties"][name] = count;
    refused["required"].push_back(name);
  }
  return Json{{"type", "object"},
              {"description", description},
              {"required", {"admitted", "replayed", "refused", "total_attempts", "prevented"}},
              {"properties",
               {{"admitted", count},
                {"replayed", count},
                {"refused", refused},
                {"total_attempts", count},
                {"prevented", count}}}};
}

Json batching_schema() {
  Json count = {{"type", "integer"}, {"minimum", 0}};
  return Json{{"type", "object"},
              {"description",
               "This process's group commit since it opened the ledger: decisions (ledger reads and writes "
               "answered) and the transactions that carried them; queued = waiting for the next one now"},
              {"required", {"transactions", "decisions", "queued"}},
              {"properties", {{"transactions", count}, {"decisions", count}, {"queued", count}}}};
}

// An output schema: every field documented at the top, and oneOf tying each
// status to the fields it brings.
Json outcome_schema(std::initializer_list<std::pair<const char*, std::vector<const char*>>> statuses,
                    Json properties) {
  Json names = Json::array();
  Json variants = Json::array();
  for (const auto& [status, fields] : statuses) {
    names.push_back(status);
    Json required = Json::array();
    for (const char* field : fields) required.push_back(field);
    variants.push_back(Json{{"properties", {{"status", {{"const", status}}}}}, {"required", required}});
  }
  properties["status"] = Json{{"type", "string"}, {"enum", names}};
  properties["message"] = Json{{"type", "string"}, {"description", "What this means and what to do next"}};
  properties["reason"] = reason_schema();
  properties["explanation"] = Json{{"type", "string"}, {"description", "The fence's account of a refusal"}};
  properties["detail"] = Json{{"type", "object"},
                              {"description", "Facts behind a refusal, e.g. {domain, expected, actual} for "
                                              "stale_read_set"}};
  return Json{{"type", "object"},
              {"properties", std::move(properties)},
              {"required", {"status"}},
              {"oneOf", std::move(variants)}};
}

Json input_schema(Json properties, std::vector<const char*> required) {
  Json schema = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) {
    schema["required"] = Json::array();
    for (const char* name : required) schema["required"].push_back(name);
  }
  return schema;
}

Json annotations(bool read_only, bool idempotent, bool destructive) {
  return Json{{"readOnlyHint", read_only},
              {"idempotentHint", idempotent},
              {"destructiveHint", destructive},
              {"openWorldHint", false}};
}

// ---- argument conversion ---------------------------------------------------

Ticket ticket_argument(const Json& arguments, bool* well_formed) {
  std::optional<Ticket> ticket = Ticket::from_json(arguments.at("prepared"));
  *well_formed = ticket.has_value();
  return ticket.value_or(Ticket{});
}

ToolResult malformed_ticket(Step step) {
  return ToolResult{refusal_json(Refusal{Reason::ticket_invalid, Cause::ticket_unreadable}, step), true};
}

// Moves the fields out of a (checked against the inputSchema already)
// rather than copying them.
PrepareRequest prepare_request(Json& a) {
  auto take_string = [&a](const char* key) { return std::move(a.at(key).get_ref<std::string&>()); };
  PrepareRequest request;
  request.intent = take_string("intent");
  request.domain = take_string("domain");
  request.tool = take_string("tool");
  request.args = std::move(a.at("args"));
  request.agent = take_string("agent");
  if (auto rs = a.find("read_set"); rs != a.end()) {
    auto read_set = read_set_from_json(*rs);
    if (!read_set) throw InvalidArguments("read_set must be a list of {domain, seq} with integer seq >= 0");
    request.read_set = std::move(*read_set);
  }
  if (auto parent = a.find("parent"); parent != a.end()) request.parent = std::move(parent->get_ref<std::string&>());
  if (auto clock = a.find("known_clock"); clock != a.end()) {
    auto known = VectorClock::from_json(*clock);
    if (!known) throw InvalidArguments("known_clock must map agent names to integer counters >= 0");
    request.known_clock = std::move(*known);
  }
  return request;
}

ToolResult refused(const Refusal& refusal, Step step) { return ToolResult{refusal_json(refusal, step), true}; }

bool is_routine(Reason reason) {
  return reason == Reason::in_flight || reason == Reason::domain_race || reason == Reason::ledger_busy;
}

// A ledger that failed (a disk error, a full disk, a file moved away, a
// connection lost): an operator's business. A server that is stopping, or
// a ledger closing, refuses as ledger_error too, as it should.
bool is_ledger_failure(const Refusal& refusal) {
  return is_storage_failure(refusal.cause);
}

void log_refusal(Logger& log, const std::string& what, const Refusal& refusal, Step step) {
  LogLevel level = LogLevel::info;
  if (is_routine(refusal.reason)) level = LogLevel::debug;
  else if (is_ledger_failure(refusal)) level = LogLevel::warn;
  if (!log.enabled(level)) return;  // routine refusals at the default level: no line to build
  const std::string line = what + ": refused " + reason_name(refusal.reason) + ": " + explain(refusal, step);
  log.log(level, line);
}

// ---- the tools -------------------------------------------------------------

// The tool results for the outcomes of the asynchronous calls (what names the call in logs).
ToolResult prepare_result(const PrepareOutcome& outcome, const std::string& tool, const std::string& what,
                          Logger& log);
ToolResult commit_result(const CommitOutcome& outcome, const std::string& what, Logger& log);

using Admissions = std::shared_ptr<SessionAdmissions>;
using Metrics = std::shared_ptr<DecisionMetrics>;
using Clock = std::chrono::steady_clock;

// Whether a commit or abort outcome leaves the ticket holding nothing to
// fence: recorded, or refused because the ticket no longer holds its intent.
// Every other refusal (a result that cannot be recorded, an edited ticket, a
// ledger that could not decide) leaves the admission in flight, still the
// session's to fence.
template <typename Outcome>
bool settles(const Outcome& outcome) {
  const auto* refusal = std::get_if<Refusal>(&outcome);
  return !refusal || refusal->reason == Reason::lease_lost;
}

Tool prepare_tool(Fence& fence, Logger& log, Admissions admissions, Metrics metrics) {
  Tool tool;
  tool.name = "fence_prepare";
  tool.title = "Ask to run a side effect exactly once";
  tool.description =
      "Call this BEFORE running a side-effecting tool. Returns status \"fresh\" with a \"prepared\" ticket: "
      "you hold the action, so run the tool now, then call fence_commit with the ticket and the tool's result "
      "(or fence_abort if it failed). Returns status \"already_done\" with \"cert\": the action already ran, so "
      "do NOT run the tool again and use cert.result. A refusal (isError, status \"refused\") means do NOT run "
      "the tool; its message says whether to retry later, decide again, or ask an operator.";
  tool.input_schema = input_schema(
      {{"intent", name_schema("Stable id of the logical action, the same on every retry and for every agent "
                              "that might attempt it, e.g. \"charge:order-123\"")},
       {"domain", name_schema("Contention scope the action changes, e.g. \"order:123\"; read_set entries and "
                              "fence_status refer to it")},
       {"tool", name_schema("Name of the side-effecting tool you are about to run")},
       {"args", {{"type", "object"},
                 {"description", "The exact arguments you will pass to that tool. The same intent with a different "
                                 "tool or args is refused (payload_mismatch)"}}},
       {"agent", name_schema("Your agent id; recorded in the certificate and its vector clock")},
       {"read_set", {{"type", "array"},
                     {"description", "What your decision was based on: for each domain you read, the seq that "
                                     "fence_status reported. If any moved since, the attempt is refused "
                                     "(stale_read_set)"},
                     {"items", input_schema({{"domain", name_schema("A domain you read")},
                                             {"seq", {{"type", "integer"}, {"minimum", 0}}}},
                                            {"domain", "seq"})}}},
       {"parent", {{"type", "string"},
                   {"description", "Hash of the certificate this effect builds on; default: the domain's latest"}}},
       {"known_clock", {{"type", "object"},
                        {"additionalProperties", {{"type", "integer"}, {"minimum", 0}, {"maximum", kMaxKnownCounter}}},
                        {"description", "The vector clock you have observed (agent -> counter), e.g. a "
                                        "certificate's vector_clock"}}}},
      {"intent", "domain", "tool", "args", "agent"});
  tool.output_schema = outcome_schema(
      {{"fresh", {"prepared", "message"}}, {"already_done", {"cert", "message"}}, {"refused", {"reason", "message"}}},
      {{"prepared", issued_ticket_schema()}, {"cert", certificate_schema()}});
  tool.annotations = annotations(false, false, false);
  tool.async_handler = [&fence, &log, admissions, metrics](Json&& arguments, Tool::Respond respond) {
    PrepareRequest request = prepare_request(arguments);
    std::string tool_name = request.tool;
    std::string what = "fence_prepare " + request.intent + " by " + request.agent;
    const Clock::time_point began = Clock::now();
    fence.prepare_async(std::move(request), [&log, admissions, metrics, began, respond = std::move(respond),
                                             tool_name = std::move(tool_name), what = std::move(what)](PrepareOutcome outcome) {
      if (metrics) metrics->prepared(outcome, Clock::now() - began);
      if (auto* admitted = std::get_if<Admitted>(&outcome); admitted && admissions) admissions->held(admitted->ticket);
      respond(prepare_result(outcome, tool_name, what, log));
    });
  };
  // A fresh ticket that never reached the client: nothing can run under it,
  // and left in flight it would keep every retry refused while this process
  // lives (its holder is alive), then be fenced for an operator at exit.
  tool.on_undelivered = [&fence, &log, admissions](const ToolResult& result) {
    const Json structured = result.structured_json();  // rare: read back from the text
    if (structured.value("status", "") != "fresh") return;
    const std::optional<Ticket> ticket = Ticket::from_json(structured.at("prepared"));
    if (!ticket) return;
    fence.withdraw_async(*ticket,
                         "fence_prepare's ticket never reached the client (the call was cancelled, or the "
                         "client stopped reading); nothing ran",
                         [&log, admissions, ticket = *ticket](bool withdrawn) {
                           if (!withdrawn) return;
                           if (admissions) admissions->settled(ticket);
                           log.info("withdrew the admission of " + ticket.intent +
                                    ": its ticket never reached the client (the call was cancelled, or the client "
                                    "stopped reading); a retry is fresh");
                         });
  };
  return tool;
}


ToolResult prepare_result(const PrepareOutcome& outcome, const std::string& tool, const std::string& what,
                          Logger& log) {
  if (auto* admitted = std::get_if<Admitted>(&outcome)) {
    // Per-call successes are debug: the ledger's events table is the record
    // of every admission and commit, and a line per call cost a sixth of
    // serve's CPU per decision.
    if (log.enabled(LogLevel::debug)) {
      log.debug(what + ": fresh (seq " + std::to_string(admitted->ticket.seq) + ", generation " +
                std::to_string(admitted->ticket.generation) + ")");
    }
    JsonText out;
    out.begin_object()
        .member("message", "you hold this action: run " + tool +
                               " now, then call fence_commit with this prepared ticket and its result "
                               "(fence_abort if it failed; fence_heartbeat if it may outlast the lease)")
        .key("prepared");
    write_ticket(out, admitted->ticket);
    out.member("status", "fresh").end_object();
    return ToolResult::of_text(out.take(), false);
  }
  if (auto* replayed = std::get_if<Replayed>(&outcome)) {
    if (log.enabled(LogLevel::debug)) log.debug(what + ": already done, replaying " + replayed->cert.hash);
    JsonText out;
    out.begin_object().key("cert");
    write_certificate(out, replayed->cert);
    out.member("message", "this action already ran: do NOT run " + tool + " again; its recorded result is cert.result")
        .member("status", "already_done")
        .end_object();
    return ToolResult::of_text(out.take(), false);
  }
  const Refusal& refusal = std::get<Refusal>(outcome);
  log_refusal(log, what, refusal, Step::prepare);
  return refused(refusal, Step::prepare);
}

Tool commit_tool(Fence& fence, Logger& log, Admissions admissions, Metrics metrics) {
  Tool tool;
  tool.name = "fence_commit";
  tool.title = "Record the result of a fenced side effect";
  tool.description =
      "Call after running the tool that fence_prepare admitted, with the unchanged \"prepared\" ticket and the "
      "tool's result. Returns status \"committed\" with the certificate; later duplicates of the intent get "
      "this result replayed instead of running the tool again.";
  tool.input_schema = input_schema(
      {{"prepared", ticket_schema()},
       {"result",
        {{"description", "The tool's result, as it returned it (any JSON). The whole message is limited to 4 MiB: "
                         "for a larger result, commit a summary of it (what it changed, its ids)"}}}},
      {"prepared", "result"});
  tool.output_schema = outcome_schema({{"committed", {"cert", "message"}}, {"refused", {"reason", "message"}}},
                                      {{"cert", certificate_schema()}});
  tool.annotations = annotations(false, false, false);
  tool.async_handler = [&fence, &log, admissions, metrics](Json&& arguments, Tool::Respond respond) {
    bool well_formed = false;
    const Ticket ticket = ticket_argument(arguments, &well_formed);
    if (!well_formed) return respond(malformed_ticket(Step::commit));
    const Clock::time_point began = Clock::now();
    fence.commit_async(ticket, std::move(arguments.at("result")),
                       [&log, admissions, metrics, began, ticket, respond = std::move(respond),
                        what = "fence_commit " + ticket.intent](CommitOutcome outcome) {
                         if (metrics) metrics->committed(outcome, Clock::now() - began);
                         if (admissions && settles(outcome)) admissions->settled(ticket);
                         respond(commit_result(outcome, what, log));
                       });
  };
  return tool;
}

ToolResult commit_result(const CommitOutcome& outcome, const std::string& what, Logger& log) {
  if (auto* cert = std::get_if<Certificate>(&outcome)) {
    if (log.enabled(LogLevel::debug)) log.debug(what + ": committed " + cert->hash);
    JsonText out;
    out.begin_object().key("cert");
    write_certificate(out, *cert);
    out.member("message", "recorded: duplicates of this intent now get this certificate")
        .member("status", "committed")
        .end_object();
    return ToolResult::of_text(out.take(), false);
  }
  log_refusal(log, what, std::get<Refusal>(outcome), Step::commit);
  return refused(std::get<Refusal>(outcome), Step::commit);
}

Tool abort_tool(Fence& fence, Logger& log, Admissions admissions, Metrics metrics) {
  Tool tool;
  tool.name = "fence_abort";
  tool.title = "Report that a fenced side effect failed";
  tool.description =
      "Call instead of fence_commit when the admitted tool failed or you could not tell whether it took effect. "
      "The intent is fenced as failed: every later fence_prepare of it is refused (prior_failure) until an "
      "operator reconciles and clears it, because the effect may have happened.";
  tool.input_schema = input_schema(
      {{"prepared", ticket_schema()},
       {"reason", string_schema("What went wrong, for the operator who will reconcile it")}},
      {"prepared", "reason"});
  tool.output_schema = outcome_schema({{"aborted", {"intent", "message"}}, {"refused", {"reason", "message"}}},
                                      {{"intent", {{"type", "string"}}}});
  tool.annotations = annotations(false, false, true);
  tool.handler = [&fence, &log, admissions, metrics](const Json& arguments) {
    bool well_formed = false;
    const Ticket ticket = ticket_argument(arguments, &well_formed);
    if (!well_formed) return malformed_ticket(Step::abort);
    const std::string why = arguments.at("reason").get<std::string>();
    const Clock::time_point began = Clock::now();
    AbortOutcome outcome = fence.abort(ticket, why);
    if (metrics) metrics->aborted(outcome, Clock::now() - began);
    if (admissions && settles(outcome)) admissions->settled(ticket);
    if (auto* aborted = std::get_if<Aborted>(&outcome)) {
      log.info("fence_abort " + aborted->intent + ": fenced as failed: " + why);
      return ToolResult{Json{{"status", "aborted"},
                             {"intent", aborted->intent},
                             {"message", "the intent is fenced as failed until an operator reconciles and clears it; "
                                         "do not retry it yourself"}},
                        false};
    }
    log_refusal(log, "fence_abort " + ticket.intent, std::get<Refusal>(outcome), Step::abort);
    return refused(std::get<Refusal>(outcome), Step::abort);
  };
  return tool;
}

Tool heartbeat_tool(Fence& fence, Logger& log, Admissions admissions, Metrics metrics) {
  Tool tool;
  tool.name = "fence_heartbeat";
  tool.title = "Keep holding a long-running side effect";
  tool.description =
      "Extends the lease of an admitted ticket while its tool is still running (call about every third of the "
      "lease). Without it, an attempt that outlives its lease can be taken over and run a second time. "
      "Returns status \"extended\" with the new lease_expires_at (ms since the epoch).";
  tool.input_schema = input_schema({{"prepared", ticket_schema()}}, {"prepared"});
  tool.output_schema = outcome_schema(
      {{"extended", {"lease_expires_at", "message"}}, {"refused", {"reason", "message"}}},
      {{"lease_expires_at", {{"type", "integer"}, {"description", "When the lease lapses, in ms since the epoch"}}}});
  tool.annotations = annotations(false, true, false);
  tool.handler = [&fence, &log, admissions, metrics](const Json& arguments) {
    bool well_formed = false;
    const Ticket ticket = ticket_argument(arguments, &well_formed);
    if (!well_formed) return malformed_ticket(Step::heartbeat);
    const Clock::time_point began = Clock::now();
    HeartbeatOutcome outcome = fence.heartbeat(ticket);
    if (metrics) metrics->extended(outcome, Clock::now() - began);
    if (auto* extended = std::get_if<Extended>(&outcome)) {
      if (admissions) admissions->held(ticket);
      log.debug("fence_heartbeat " + ticket.intent + ": extended to " + std::to_string(extended->lease_expires_at_ms));
      return ToolResult{Json{{"status", "extended"},
                             {"lease_expires_at", extended->lease_expires_at_ms},
                             {"message", "you still hold this action; commit or heartbeat again before "
                                         "lease_expires_at"}},
                        false};
    }
    log_refusal(log, "fence_heartbeat " + ticket.intent, std::get<Refusal>(outcome), Step::heartbeat);
    return refused(std::get<Refusal>(outcome), Step::heartbeat);
  };
  return tool;
}

Tool status_tool(Fence& fence) {
  Tool tool;
  tool.name = "fence_status";
  tool.title = "Look up an intent and a domain";
  tool.description =
      "Read-only; never creates anything. Give intent, domain or both. \"intent\" tells its state: none (never "
      "prepared), in_flight, done (with its certificate), failed or unknown (fenced, with the reason; an "
      "operator must clear it), cleared. \"domain\" tells its current seq and vector clock: put {domain, seq} "
      "into fence_prepare's read_set to be refused if it moves before you act; its \"fenced\" counts actions on it "
      "fenced failed or unknown, which may have happened. Asking only for an intent also reports that intent's "
      "domain.";
  tool.input_schema = input_schema(
      {{"intent", string_schema("The intent id to look up")}, {"domain", string_schema("The domain to look up")}}, {});
  const Json text = {{"type", "string"}};
  const Json count = {{"type", "integer"}, {"minimum", 0}};
  Json intent_schema = {
      {"type", "object"},
      {"required", {"state", "intent"}},
      {"properties",
       {{"state", {{"type", "string"}, {"enum", {"none", "in_flight", "done", "failed", "unknown", "cleared"}}}},
        {"intent", text},
        {"domain", text},
        {"tool", text},
        {"agent", text},
        {"seq", count},
        {"generation", count},
        {"lease_expires_at_ms", {{"type", "integer"}, {"description", "in_flight only"}}},
        {"reason", {{"type", "string"}, {"description", "failed, unknown, cleared: why"}}},
        {"cert", certificate_schema()}}}};
  Json domain_schema = {
      {"type", "object"},
      {"required", {"domain", "exists", "seq", "clock"}},
      {"properties",
       {{"domain", text},
        {"exists", {{"type", "boolean"}}},
        {"seq", {{"type", "integer"}, {"minimum", 0}, {"description", "Put {domain, seq} in a read_set"}}},
        {"clock", {{"type", "object"}, {"description", "Merge of every committed effect's vector clock"}}},
        {"head", {{"type", {"string", "null"}}, {"description", "Latest certificate hash on the domain"}}},
        {"in_flight", count},
        {"fenced",
         {{"type", "integer"},
          {"minimum", 0},
          {"description", "Actions on the domain fenced failed or unknown and not cleared: they may have happened, "
                          "and the domain's state with them"}}}}}};
  tool.output_schema = outcome_schema({{"ok", {}}, {"refused", {"reason", "message"}}},
                                      {{"intent", intent_schema}, {"domain", domain_schema}});
  tool.annotations = annotations(true, true, false);
  tool.handler = [&fence](const Json& arguments) {
    const std::string intent = arguments.value("intent", std::string());
    std::string domain = arguments.value("domain", std::string());
    if (intent.empty() && domain.empty()) throw InvalidArguments("give \"intent\", \"domain\" or both");

    Json out = {{"status", "ok"}};
    if (!intent.empty()) {
      auto status = fence.intent_status(intent);
      if (auto* refusal = std::get_if<Refusal>(&status)) return refused(*refusal, Step::read);
      const IntentStatus& found = std::get<IntentStatus>(status);
      out["intent"] = found.to_json();
      if (domain.empty()) domain = found.domain;
    }
    if (!domain.empty()) {
      auto status = fence.domain_status(domain);
      if (auto* refusal = std::get_if<Refusal>(&status)) return refused(*refusal, Step::read);
      out["domain"] = std::get<DomainStatus>(status).to_json();
    }
    return ToolResult{std::move(out), false};
  };
  return tool;
}

Tool stats_tool(Fence& fence) {
  Tool tool;
  tool.name = "fence_stats";
  tool.title = "Count what the fence prevented";
  tool.description =
      "Read-only counters, for this server process (\"process\") and for every process on the ledger file "
      "(\"ledger\"): admitted (effects allowed to run), replayed (duplicates handed a recorded result), "
      "refused by cause, total_attempts, and prevented = every attempt that did not run the effect; and "
      "how this process's ledger writes were batched (\"batching\": decisions per transaction).";
  tool.input_schema = input_schema(Json::object(), {});
  tool.output_schema = outcome_schema(
      {{"ok", {"process", "ledger", "batching"}}, {"refused", {"reason", "message"}}},
      {{"process", counters_schema("Since this server process opened the ledger")},
       {"ledger", counters_schema("Every process, for the life of the ledger file")},
       {"batching", batching_schema()}});
  tool.annotations = annotations(true, true, false);
  tool.handler = [&fence](const Json&) {
    auto stats = fence.stats();
    if (auto* refusal = std::get_if<Refusal>(&stats)) return refused(*refusal, Step::read);
    const Stats& s = std::get<Stats>(stats);
    const LedgerMetrics m = fence.ledger_metrics();
    return ToolResult{Json{{"status", "ok"},
                           {"process", s.process.to_json()},
                           {"ledger", s.ledger.to_json()},
                           {"batching",
                            {{"transactions", m.transactions}, {"decisions", m.decisions}, {"queued", m.queued}}}},
                      false};
  };
  return tool;
}

}  // namespace

// Members in the order serialize writes them (sorted keys), the values as
// Ticket::to_json and Certificate::to_json give them.
void write_ticket(JsonText& out, const Ticket& ticket) {
  out.begin_object()
      .member("domain", ticket.domain)
      .member("generation", ticket.generation)
      .member("intent", ticket.intent)
      .member("lease_expires_at_ms", ticket.lease_expires_at_ms)
      .member("seq", ticket.seq)
      .member("token", ticket.token)
      .end_object();
}

void write_certificate(JsonText& out, const Certificate& cert) {
  out.begin_object()
      .member("agent", cert.agent)
      .key("args").json(cert.args)
      .member("domain", cert.domain)
      .member("generation", cert.generation)
      .member("hash", cert.hash)
      .member("intent", cert.intent);
  if (cert.parent.empty()) out.key("parent").null();
  else out.member("parent", cert.parent);
  out.key("read_set").json(read_set_to_json(cert.read_set))
      .key("result").json(cert.result)
      .member("seq", cert.seq)
      .member("tool", cert.tool)
      .key("vector_clock").json(cert.vector_clock.to_json())
      .end_object();
}

Json refusal_json(const Refusal& refusal, Step step) {
  Json out = {{"status", "refused"},
              {"reason", reason_name(refusal.reason)},
              {"message", advise(refusal.reason, step)},
              {"explanation", explain(refusal, step)}};
  if (refusal.detail.is_object() && !refusal.detail.empty()) out["detail"] = refusal.detail;
  return out;
}

namespace {

// Arguments the tool refuses are a refusal the model reads and can correct
// (MCP 2025-11-25), in the shape every fence tool's outputSchema allows.
Tool refusing_bad_arguments(Tool tool, Step step) {
  tool.invalid_arguments = [step](const std::string& message) {
    return refused(Refusal{Reason::invalid_request, Cause::bad_argument, {{"problem", "schema"}, {"error", message}}},
                   step);
  };
  return tool;
}

}  // namespace

std::vector<Tool> fence_tools(Fence& fence, Logger& log, std::shared_ptr<SessionAdmissions> admissions,
                              std::shared_ptr<DecisionMetrics> metrics) {
  std::vector<Tool> tools;
  tools.push_back(refusing_bad_arguments(prepare_tool(fence, log, admissions, metrics), Step::prepare));
  tools.push_back(refusing_bad_arguments(commit_tool(fence, log, admissions, metrics), Step::commit));
  tools.push_back(refusing_bad_arguments(abort_tool(fence, log, admissions, metrics), Step::abort));
  tools.push_back(refusing_bad_arguments(heartbeat_tool(fence, log, admissions, metrics), Step::heartbeat));
  tools.push_back(refusing_bad_arguments(status_tool(fence), Step::read));
  tools.push_back(refusing_bad_arguments(stats_tool(fence), Step::read));
  return tools;
}

}  // namespace effectfence::mcp
