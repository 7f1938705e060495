#include "pair_driver.h"

#include <unistd.h>

#include <stdexcept>
#include <utility>

namespace effectfence::bench {
namespace {

constexpr size_t kMaxExamples = 5;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// Far beyond any healthy answer: a server this silent is stuck or gone.
constexpr auto kSilenceLimit = std::chrono::seconds(30);

// The tool's structured answer, or null when the call failed as a whole.
const Json* structured_outcome(const Json& message) {
  const auto result = message.find("result");
  if (result == message.end() || !result->is_object()) return nullptr;
  const auto outcome = result->find("structuredContent");
  if (outcome == result->end() || !outcome->is_object()) return nullptr;
  return &*outcome;
}

// "refused (in_flight)", "already_done", "JSON-RPC error -32602", ...
std::string outcome_kind(const Json& message) {
  if (const Json* outcome = structured_outcome(message)) {
    std::string kind = outcome->value("status", std::string("no status"));
    if (outcome->contains("reason")) kind += " (" + outcome->value("reason", std::string()) + ")";
    return kind;
  }
  if (const auto error = message.find("error"); error != message.end() && error->is_object()) {
    return "JSON-RPC error " + std::to_string(error->value("code", 0));
  }
  return "malformed response";
}

std::string status_of(const Json& message) {
  const Json* outcome = structured_outcome(message);
  return outcome ? outcome->value("status", std::string()) : std::string();
}

}  // namespace

void Anomalies::note(const std::string& kind, const std::string& detail) {
  ++counts[kind];
  if (examples.size() < kMaxExamples) examples.push_back(kind + ": " + detail.substr(0, 400));
}

size_t Anomalies::total() const {
  size_t n = 0;
  for (const auto& [kind, count] : counts) n += count;
  return n;
}

PairDriver::PairDriver(ChildProcess& server, Anomalies& anomalies, IntentNames intent_names)
    : server_(server),
      anomalies_(anomalies),
      intent_prefix_("bench-" + std::to_string(::getpid()) + "-"),
      intent_names_(intent_names) {}

void PairDriver::handshake() {
  const int64_t id = next_id_++;
  server_.send_line(Json{{"jsonrpc", "2.0"},
                         {"id", id},
                         {"method", "initialize"},
                         {"params",
                          {{"protocolVersion", "2025-06-18"},
                           {"capabilities", Json::object()},
                           {"clientInfo", {{"name", "effectfence_bench"}, {"version", "1"}}}}}}
                        .dump());
  for (;;) {
    for (const std::string& line : wait_for_lines()) {
      const Json message = Json::parse(line);
      if (message.value("id", Json()) != id) continue;
      if (!message.contains("result")) throw std::runtime_error("initialize failed: " + line);
      server_.send_line(Json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump());
      return;
    }
  }
}

PairDriver::Batching PairDriver::batching() {
  const int64_t id = send_call("fence_stats", Json::object());
  for (;;) {
    for (const std::string& line : wait_for_lines()) {
      const Json message = Json::parse(line);
      if (message.value("id", Json()) != id) continue;
      const Json b = message.value(Json::json_pointer("/result/structuredContent/batching"), Json());
      if (!b.is_object()) throw std::runtime_error("fence_stats has no batching: " + line);
      return Batching{b.value("transactions", int64_t{0}), b.value("decisions", int64_t{0})};
    }
  }
}

Timings PairDriver::run(size_t in_flight, double seconds, Work work, int64_t max_pairs) {
  timings_ = Timings{};
  work_ = work;
  pairs_left_ = max_pairs;
  slots_.assign(in_flight, Slot{});
  const auto start = Clock::now();
  deadline_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (size_t slot = 0; slot < in_flight && pairs_left_ != 0; ++slot) start_pair(slot);
  while (!pending_.empty()) {
    for (const std::string& line : wait_for_lines()) on_message(line);
  }
  timings_.elapsed_s = seconds_between(start, Clock::now());
  return std::move(timings_);
}

// Returns at least one line, or throws if the server went quiet or away.
std::vector<std::string> PairDriver::wait_for_lines() {
  std::vector<std::string> lines;
  const auto give_up = Clock::now() + kSilenceLimit;
  while (lines.empty()) {
    if (!server_.pump(kPollInterval, &lines)) throw std::runtime_error("the server closed its stdout");
    if (lines.empty() && Clock::now() > give_up) throw std::runtime_error("the server stopped answering");
  }
  return lines;
}

int64_t PairDriver::send_call(const char* tool, Json arguments) {
  const int64_t id = next_id_++;
  server_.send_line(Json{{"jsonrpc", "2.0"},
                         {"id", id},
                         {"method", "tools/call"},
                         {"params", {{"name", tool}, {"arguments", std::move(arguments)}}}}
                        .dump());
  return id;
}

int64_t PairDriver::send_ping() {
  const int64_t id = next_id_++;
  server_.send_line(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "ping"}}.dump());
  return id;
}

// Each slot works on its own domain, like an agent on its own account, so
// pairs never contend with each other: every refusal is an anomaly.
void PairDriver::start_pair(size_t slot) {
  Slot& s = slots_[slot];
  if (pairs_left_ > 0) --pairs_left_;
  s.pair = next_pair_++;
  s.started = Clock::now();
  if (work_ == Work::ping) {
    pending_[send_ping()] = Pending{slot, Step::first_ping};
    return;
  }
  const int64_t id = send_call("fence_prepare", Json{{"intent", intent_name(intent_prefix_, s.pair, intent_names_)},
                                                     {"domain", "bench-account-" + std::to_string(slot)},
                                                     {"tool", "charge_card"},
                                                     {"args", {{"order", s.pair}, {"amount_cents", 1299}}},
                                                     {"agent", "bench-agent-" + std::to_string(slot)}});
  pending_[id] = Pending{slot, Step::prepare};
}

void PairDriver::end_pair(size_t slot, bool completed) {
  const auto now = Clock::now();
  if (completed) timings_.samples.push_back(seconds_between(slots_[slot].started, now));
  if (now < deadline_ && pairs_left_ != 0) start_pair(slot);
}

void PairDriver::on_message(const std::string& line) {
  Json message;
  try {
    message = Json::parse(line);
  } catch (const Json::parse_error&) {
    anomalies_.note("unparseable line", line);
    return;
  }
  const Json id = message.value("id", Json());
  const auto found = id.is_number_integer() ? pending_.find(id.get<int64_t>()) : pending_.end();
  if (found == pending_.end()) {
    anomalies_.note("answer to no call in flight", line);
    return;
  }
  const Pending call = found->second;
  pending_.erase(found);
  try {
    switch (call.step) {
      case Step::prepare: on_prepared(call.slot, message); break;
      case Step::commit: on_committed(call.slot, message); break;
      case Step::first_ping:
      case Step::second_ping: on_pinged(call.slot, call.step, message); break;
    }
  } catch (const Json::exception& e) {
    anomalies_.note("malformed response", e.what() + std::string(": ") + line);
    end_pair(call.slot, false);
  }
}

void PairDriver::on_prepared(size_t slot, const Json& message) {
  if (status_of(message) != "fresh") {
    anomalies_.note("prepare: " + outcome_kind(message), message.dump());
    end_pair(slot, false);
    return;
  }
  const Json& ticket = structured_outcome(message)->at("prepared");
  const Json result = {{"charged", true}, {"receipt", "r-" + std::to_string(slots_[slot].pair)}};
  const int64_t id = send_call("fence_commit", Json{{"prepared", ticket}, {"result", result}});
  pending_[id] = Pending{slot, Step::commit};
}

void PairDriver::on_committed(size_t slot, const Json& message) {
  const std::string expected_intent = intent_name(intent_prefix_, slots_[slot].pair, intent_names_);
  bool completed = false;
  if (status_of(message) != "committed") {
    anomalies_.note("commit: " + outcome_kind(message), message.dump());
  } else if (structured_outcome(message)->value(Json::json_pointer("/cert/intent"), std::string()) !=
             expected_intent) {
    anomalies_.note("commit: certificate for another intent", message.dump());
  } else {
    completed = true;
  }
  end_pair(slot, completed);
}

void PairDriver::on_pinged(size_t slot, Step step, const Json& message) {
  const auto result = message.find("result");
  if (result == message.end() || !result->is_object() || !result->empty()) {
    anomalies_.note("ping: not an empty result", message.dump());
    end_pair(slot, false);
  } else if (step == Step::first_ping) {
    pending_[send_ping()] = Pending{slot, Step::second_ping};
  } else {
    end_pair(slot, true);
  }
}

}  // namespace effectfence::bench
