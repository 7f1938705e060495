#include "mcp/proxy.h"
#include "mcp/raw_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "mcp/jsonrpc.h"
#include "support/fence_helpers.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::mcp;
using namespace std::chrono_literals;

namespace {

// An MCP server played by the test over real pipes: each message it reads
// goes to a script that returns the raw lines to answer with (garbage
// included).
class FakeChild {
 public:
  using Script = std::function<std::vector<std::string>(const Json& message)>;

  explicit FakeChild(Script script) : script_(std::move(script)) {
    // Built on the proxy's threads too, where Catch's assertions may not run.
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::abort();
    reads_ = in[0];
    client_out_ = in[1];
    client_in_ = out[0];
    writes_ = out[1];
    reader_ = std::thread([this] { serve(); });
  }
  ~FakeChild() {
    ::close(client_out_);  // the reader sees the end of its input
    reader_.join();
    for (int fd : {reads_, client_in_, writes_}) ::close(fd);
  }

  std::unique_ptr<ChildLink> link(McpClient::Handlers handlers, Logger& log) {
    auto link = std::make_unique<ChildLink>();
    link->client = std::make_unique<McpClient>(client_in_, client_out_, log, std::move(handlers));
    return link;
  }
  // What a crash looks like to the client: its output ends.
  // Every line it has read, as written.
  std::vector<std::string> heard() {
    std::lock_guard<std::mutex> lock(heard_mutex_);
    return heard_;
  }
  void die() {
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ::dup2(devnull, writes_);
    ::close(devnull);
  }

 private:
  void serve() {
    FdLineReader reader(reads_, -1);
    Line line;
    while (reader.next(&line) == ReadEvent::line) {
      {
        std::lock_guard<std::mutex> lock(heard_mutex_);
        heard_.push_back(line.text);
      }
      for (const std::string& answer : script_(Json::parse(line.text))) {
        const std::string framed = answer + "\n";
        (void)!::write(writes_, framed.data(), framed.size());
      }
    }
  }

  Script script_;
  std::mutex heard_mutex_;
  std::vector<std::string> heard_;
  int reads_ = -1, client_out_ = -1, client_in_ = -1, writes_ = -1;
  std::thread reader_;
};

Json tool_entry(const std::string& name, Json annotations = nullptr) {
  Json entry = {{"name", name}, {"inputSchema", {{"type", "object"}}}};
  if (!annotations.is_null()) entry["annotations"] = std::move(annotations);
  return entry;
}

std::string answer(const Json& id, Json result) { return jsonrpc::result_response(id, std::move(result)).dump(); }

Json text_content(const std::string& text) {
  return Json{{"content", Json::array({Json{{"type", "text"}, {"text", text}}})}};
}

// Answers the handshake and tools/list; tools/call goes to on_call.
FakeChild::Script server_script(std::function<std::vector<std::string>(const Json&)> on_call) {
  return [on_call](const Json& m) -> std::vector<std::string> {
    const std::string method = m.value("method", "");
    if (method == "initialize") {
      return {answer(m["id"], {{"protocolVersion", "2025-06-18"},
                               {"capabilities", {{"tools", Json::object()}}},
                               {"serverInfo", {{"name", "fake"}, {"version", "1"}}}})};
    }
    if (method == "tools/list") {
      return {answer(m["id"], {{"tools", {tool_entry("act"), tool_entry("look", {{"readOnlyHint", true}})}}})};
    }
    if (method == "tools/call") return on_call(m);
    return {};
  };
}

struct Harness {
  Logger log{"proxy-test", LogLevel::error};
  std::unique_ptr<Fence> fence;
  std::mutex mutex;
  std::vector<std::unique_ptr<FakeChild>> children;  // outlive the proxy
  int launches = 0;
  int closes = 0;
  std::condition_variable closed;
  std::unique_ptr<Proxy> proxy;

  explicit Harness(FakeChild::Script script, RestartPolicy restarts = {}, Settings settings = {})
      : fence(testing::open_fence(std::move(settings))) {
    Launcher launcher = [this, script](McpClient::Handlers handlers) {
      std::lock_guard<std::mutex> lock(mutex);
      ++launches;
      handlers.on_closed = [this, inner = std::move(handlers.on_closed)](const std::string& why) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          ++closes;
          closed.notify_all();
        }
        inner(why);
      };
      children.push_back(std::make_unique<FakeChild>(script));
      return children.back()->link(std::move(handlers), log);
    };
    proxy = std::make_unique<Proxy>(*fence, launcher, log, ProxyOptions{}, restarts);
  }
  ~Harness() { proxy.reset(); }

  // Kills child i and waits until its client has noticed.
  void kill_child(size_t i) {
    child(i).die();
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(closed.wait_for(lock, 10s, [&] { return closes > static_cast<int>(i); }));
  }
  int launched() {
    std::lock_guard<std::mutex> lock(mutex);
    return launches;
  }
  FakeChild& child(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    return *children.at(i);
  }
  // The reply with a result relayed as the child wrote it (raw_json) parsed,
  // for the checks to read; its text is in sent.
  Reply call(const std::string& tool, const Json& args, std::string* sent = nullptr) {
    CallContext context(Json(1), Json::object());
    return readable(proxy->call(tool, args, context), sent);
  }
  static Reply readable(Reply reply, std::string* sent = nullptr) {
    if (is_raw_json(reply.result)) {
      if (sent) *sent = raw_json_text(reply.result);
      reply.result = Json::parse(raw_json_text(reply.result));
    }
    return reply;
  }
};

}  // namespace

TEST_CASE("is_fenced: read-only tools pass unless fence_all, only and except decide first", "[proxy]") {
  const Json writer = tool_entry("write");
  const Json reader = tool_entry("read", {{"readOnlyHint", true}});
  const Json odd = tool_entry("odd", {{"readOnlyHint", "yes"}});
  CHECK(is_fenced(FencePolicy{}, writer));
  CHECK_FALSE(is_fenced(FencePolicy{}, reader));
  CHECK(is_fenced(FencePolicy{}, odd));  // only a real true counts as read-only
  CHECK(is_fenced(FencePolicy{true, {}, {}}, reader));
  CHECK_FALSE(is_fenced(FencePolicy{false, {"read"}, {}}, writer));
  CHECK(is_fenced(FencePolicy{false, {"read"}, {}}, reader));
  CHECK_FALSE(is_fenced(FencePolicy{true, {}, {"write"}}, writer));
}

TEST_CASE("tools named in --only or --except that the server does not offer are named in a warning", "[proxy]") {
  const std::vector<Json> tools = {{{"name", "charge"}}, {{"name", "refund"}}};
  FencePolicy policy;
  CHECK(policy_names_not_offered(policy, tools).empty());
  policy.only = {"chrage", "refund"};
  CHECK(policy_names_not_offered(policy, tools) ==
        "--only names chrage, which the server does not offer (a misspelt name? its tools: charge, refund)");
  policy.only.clear();
  policy.except = {"refund", "lsit"};
  CHECK_THAT(policy_names_not_offered(policy, tools), Catch::StartsWith("--except names lsit, which"));
}

TEST_CASE("identify_call: the canonical arguments decide, or the agent's key", "[proxy]") {
  auto a = identify_call("pay", Json::parse(R"({"to":"bob","cents":100})"), Json::object(), "");
  auto b = identify_call("pay", Json::parse(R"({"cents":100.0,"to":"bob"})"), Json::object(), "");
  auto c = identify_call("pay", Json::parse(R"({"cents":101,"to":"bob"})"), Json::object(), "");
  auto other_tool = identify_call("refund", Json::parse(R"({"to":"bob","cents":100})"), Json::object(), "");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  REQUIRE(other_tool.ok());
  CHECK(a->intent == b->intent);
  CHECK(a->intent != c->intent);
  // Pinned byte for byte: intents recorded by an earlier version must keep
  // replaying. SHA-256 of the RFC 8785 form of {"tool":..,"args":..}:
  // {"args":{"cents":100,"to":"bob"},"tool":"pay"}.
  CHECK(a->intent == "wrap:pay:c3dc0b3f61dd77352cfe037124ecce817478817d86f89038fc1bac5ebba7abb2");
  CHECK(other_tool->intent != a->intent);
  CHECK(a->domain == "tool:pay");
  CHECK_FALSE(a->keyed);

  auto keyed = identify_call("pay", {{"to", "bob"}}, {{"idempotencyKey", "k-1"}}, "");
  REQUIRE(keyed.ok());
  CHECK(keyed->intent == "wrap:pay:k-1");
  CHECK(keyed->keyed);
  auto by_arg = identify_call("pay", {{"to", "bob"}, {"key", "k-2"}}, Json::object(), "key");
  REQUIRE(by_arg.ok());
  CHECK(by_arg->intent == "wrap:pay:k-2");
  // The agent's own key comes first, as it always has: what was recorded
  // under it keeps replaying.
  auto meta_first = identify_call("pay", {{"to", "bob"}, {"key", "k-2"}}, {{"idempotencyKey", "k-1"}}, "key");
  REQUIRE(meta_first.ok());
  CHECK(meta_first->intent == keyed->intent);
  auto meta_without_arg = identify_call("pay", {{"to", "bob"}}, {{"idempotencyKey", "k-1"}}, "key");
  REQUIRE(meta_without_arg.ok());
  CHECK(meta_without_arg->intent == keyed->intent);
  auto ignored_arg = identify_call("pay", {{"key", "k-2"}}, Json::object(), "");
  REQUIRE(ignored_arg.ok());
  CHECK_FALSE(ignored_arg->keyed);

  auto empty_key = identify_call("pay", Json::object(), {{"idempotencyKey", ""}}, "");
  CHECK_FALSE(empty_key.ok());
  CHECK_THAT(empty_key.status().message(), Catch::Contains("idempotencyKey"));
  auto number_key = identify_call("pay", {{"key", 7}}, Json::object(), "key");
  CHECK_FALSE(number_key.ok());
  CHECK_THAT(number_key.status().message(), Catch::Contains("\"key\""));
  auto too_large = identify_call("pay", {{"n", Json(uint64_t{1} << 60)}}, Json::object(), "");
  CHECK_FALSE(too_large.ok());
  CHECK_THAT(too_large.status().message(), Catch::Contains("cannot be fingerprinted"));
}

TEST_CASE("refusal_result: isError, what happened and what to do, and the fence's account", "[proxy]") {
  const CallIdentity identity{"wrap:pay:abc", "tool:pay", false};
  Json busy = refusal_result("pay", identity,
                             Refusal{Reason::in_flight, Cause::held,
                                     {{"intent", "wrap:pay:abc"}, {"holder_agent", "claude"}, {"lease_ends_in_ms", 4200}}}, "--db '/l.sqlite'");
  CHECK(busy["isError"] == true);
  const std::string busy_text = busy["content"][0]["text"];
  CHECK_THAT(busy_text, Catch::Contains("An identical call to pay is running") && Catch::Contains("claude"));
  CHECK(busy["_meta"]["effectfence"]["refused"] == "in_flight");
  CHECK(busy["_meta"]["effectfence"]["explanation"] ==
        "another attempt of intent 'wrap:pay:abc' (agent claude) is in flight; do not run the tool. Retry "
        "fence_prepare in a few seconds: you will get its recorded result, or the lease expires in 5 s.");

  Json fenced = refusal_result("pay", identity,
                               Refusal{Reason::prior_failure, Cause::fenced, {{"state", "unknown"}, {"recorded_reason", "child died"}}},
                               "--db '/l.sqlite'");
  const std::string fenced_text = fenced["content"][0]["text"];
  CHECK_THAT(fenced_text, Catch::Contains("child died") &&
                              Catch::Contains("effectfence clear --db '/l.sqlite' 'wrap:pay:abc'"));
  CHECK(fenced["_meta"]["effectfence"]["detail"]["state"] == "unknown");
}

TEST_CASE("with_fence_note keeps the result and the child's own _meta", "[proxy]") {
  Json result = text_content("hi");
  result["_meta"] = {{"child", 1}};
  Json noted = with_fence_note(result, {{"replayed", true}});
  CHECK(noted["content"] == result["content"]);
  CHECK(noted["_meta"]["child"] == 1);
  CHECK(noted["_meta"]["effectfence"]["replayed"] == true);
}

TEST_CASE("a fenced call runs once, through garbage and stray answers from the child", "[proxy]") {
  std::atomic<int> runs{0};
  Harness h(server_script([&](const Json& m) -> std::vector<std::string> {
    ++runs;
    return {"Listening on stdio", answer(12345, Json::object()), "{\"jsonrpc\":\"2.0\"",
            answer(m["id"], text_content("acted " + std::to_string(runs.load())))};
  }));
  REQUIRE(h.proxy->start().ok());
  REQUIRE(h.proxy->tools().size() == 2);

  Reply first = h.call("act", {{"n", 1}});
  REQUIRE_FALSE(first.error);
  CHECK(first.result["content"][0]["text"] == "acted 1");
  CHECK(first.result["_meta"]["effectfence"]["replayed"] == false);
  Reply second = h.call("act", {{"n", 1}});
  CHECK(second.result["content"][0]["text"] == "acted 1");
  CHECK(second.result["_meta"]["effectfence"]["replayed"] == true);
  CHECK(runs == 1);

  // Read-only: passed through, run every time, not noted.
  h.call("look", Json::object());
  Reply looked = h.call("look", Json::object());
  CHECK(runs == 3);
  CHECK_FALSE(looked.result.contains("_meta"));
}

TEST_CASE("what wrap relays is written as the other side wrote it: tool entries, results, the agent's params",
          "[proxy]") {
  const std::string act = R"({"name":"act","inputSchema":{"type":"object","properties":{"z":{},"a":{}}},"description":"z"})";
  const std::string look = R"({"name":"look","annotations":{"readOnlyHint":true},"inputSchema":{"type":"object"}})";
  const std::string result =
      R"({"structuredContent":{"z":1,"a":2.50,"e":1E2},"content":[{"type":"text","text":"d\u00f6ne"}],"_meta":{"child":1}})";
  Harness h([&](const Json& m) -> std::vector<std::string> {
    const std::string method = m.value("method", "");
    const std::string id = m.value("id", Json()).dump();
    if (method == "initialize") return server_script(nullptr)(m);
    if (method == "tools/list") return {R"({"jsonrpc":"2.0","id":)" + id + R"(,"result":{"tools":[)" + act + ", " + look + "]}}"};
    if (method == "tools/call") return {R"({"result": )" + result + R"( ,"jsonrpc":"2.0","id":)" + id + "}"};
    return {};
  });
  REQUIRE(h.proxy->start().ok());
  const std::vector<Tool> tools = h.proxy->tools();
  REQUIRE(tools.size() == 2);
  CHECK(raw_json_text(tools[0].listing_entry) == act);
  CHECK(raw_json_text(tools[1].listing_entry) == look);

  // A fenced call: the child's bytes, with _meta.effectfence added last in its _meta.
  CallContext fenced(Json(1), Json::object(), raw_json(R"({"name":"act","arguments":{"z":1,"a":2}})"));
  std::string text;
  Reply ran = Harness::readable(h.proxy->call("act", {{"z", 1}, {"a", 2}}, fenced), &text);
  REQUIRE_FALSE(ran.error);
  const Json note = ran.result["_meta"]["effectfence"];
  CHECK(note["replayed"] == false);
  CHECK(text == with_member_text(result, "_meta", R"({"child":1,"effectfence":)" + jsonrpc::serialize(note) + "}"));
  // Negative control: the parsed result written again is not what the child sent.
  CHECK(jsonrpc::serialize(ran.result) != text);

  // Passed through: the child's bytes, exactly.
  CallContext passed(Json(2), Json::object(), raw_json(R"({"name":"look"})"));
  Reply looked = Harness::readable(h.proxy->call("look", Json::object(), passed), &text);
  CHECK(text == result);

  // The child heard the agent's params as the agent wrote them, nothing added.
  const std::vector<std::string> heard = h.child(0).heard();
  const auto heard_params = [&](const std::string& params) {
    return std::any_of(heard.begin(), heard.end(), [&](const std::string& line) {
      return member_text(line, "params") == std::optional<std::string_view>(params);
    });
  };
  CHECK(heard_params(R"({"name":"act","arguments":{"z":1,"a":2}})"));
  CHECK(heard_params(R"({"name":"look"})"));
}

// A child whose tool "act" declares readOnlyHint: read_only, and whose
// first call of it says its tool list changed.
FakeChild::Script turning_read_only_script(std::atomic<bool>& read_only, std::atomic<int>& runs,
                                           bool turn_after_first_call) {
  return [&read_only, &runs, turn_after_first_call](const Json& m) -> std::vector<std::string> {
    const std::string method = m.value("method", "");
    if (method == "initialize") {
      return {answer(m["id"], {{"protocolVersion", "2025-06-18"},
                               {"capabilities", {{"tools", {{"listChanged", true}}}}},
                               {"serverInfo", {{"name", "fake"}, {"version", "1"}}}})};
    }
    if (method == "tools/list") {
      return {answer(m["id"], {{"tools", {tool_entry("act", {{"readOnlyHint", read_only.load()}}),
                                          tool_entry("look", {{"readOnlyHint", true}})}}})};
    }
    if (method != "tools/call") return {};
    std::vector<std::string> lines = {answer(m["id"], text_content("acted " + std::to_string(++runs)))};
    if (turn_after_first_call && !read_only.exchange(true)) {
      lines.push_back(Json{{"jsonrpc", "2.0"}, {"method", "notifications/tools/list_changed"}}.dump());
    }
    return lines;
  };
}

bool lists_act_read_only(Proxy& proxy) {
  for (const Tool& tool : proxy.tools()) {
    if (tool.name != "act") continue;
    const Json entry = is_raw_json(tool.listing_entry) ? Json::parse(raw_json_text(tool.listing_entry)) : tool.listing_entry;
    return entry["annotations"]["readOnlyHint"] == true;
  }
  return false;
}

TEST_CASE("a tool that turns read-only after it was fenced stays fenced: in its session, and in the next one on "
          "a ledger that holds its intents",
          "[proxy]") {
  testing::TempDir dir;
  Settings settings;
  settings.ledger_path = dir.file("ledger.sqlite");
  std::atomic<bool> read_only{false};
  std::atomic<int> runs{0};
  {
    Harness h(turning_read_only_script(read_only, runs, true), {}, settings);
    REQUIRE(h.proxy->start().ok());
    Reply first = h.call("act", {{"n", 1}});
    CHECK(first.result["_meta"]["effectfence"]["replayed"] == false);
    for (int i = 0; i < 500 && !lists_act_read_only(*h.proxy); ++i) std::this_thread::sleep_for(10ms);
    REQUIRE(lists_act_read_only(*h.proxy));
    Reply again = h.call("act", {{"n", 1}});
    CHECK(again.result["_meta"]["effectfence"]["replayed"] == true);
    CHECK(runs == 1);
  }
  // A new session, with the tool read-only from the start.
  Harness h(turning_read_only_script(read_only, runs, false), {}, settings);
  REQUIRE(h.proxy->start().ok());
  REQUIRE(lists_act_read_only(*h.proxy));
  Reply replayed = h.call("act", {{"n", 1}});
  CHECK(replayed.result["_meta"]["effectfence"]["replayed"] == true);
  Reply fresh = h.call("act", {{"n", 2}});
  CHECK(fresh.result["_meta"]["effectfence"]["replayed"] == false);
  CHECK(runs == 2);
  // A tool read-only all along, never fenced, still passes.
  Reply looked = h.call("look", Json::object());
  CHECK_FALSE(looked.result.contains("_meta"));
  CHECK(runs == 3);
}

TEST_CASE("a child that dies mid-call: fenced as unknown, and a new child serves the next call", "[proxy]") {
  std::mutex mutex;
  std::condition_variable asked;
  int calls_seen = 0;
  Harness h(server_script([&](const Json& m) -> std::vector<std::string> {
    if (m["params"]["arguments"].value("hang", false)) {
      std::lock_guard<std::mutex> lock(mutex);
      ++calls_seen;
      asked.notify_all();
      return {};  // never answers
    }
    return {answer(m["id"], text_content("ok"))};
  }));
  REQUIRE(h.proxy->start().ok());

  std::thread killer([&] {
    std::unique_lock<std::mutex> lock(mutex);
    asked.wait_for(lock, 10s, [&] { return calls_seen == 1; });
    h.child(0).die();
  });
  Reply died = h.call("act", {{"hang", true}});
  killer.join();
  REQUIRE_FALSE(died.error);
  CHECK(died.result["isError"] == true);
  CHECK(died.result["_meta"]["effectfence"]["fenced"] == "unknown");
  const std::string intent = died.result["_meta"]["effectfence"]["intent"];
  auto status = h.fence->intent_status(intent);
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::unknown);

  Reply again = h.call("act", {{"hang", true}});
  CHECK(again.result["_meta"]["effectfence"]["refused"] == "prior_failure");
  Reply next = h.call("act", {{"other", 1}});
  CHECK(next.result["content"][0]["text"] == "ok");
  CHECK(h.launched() == 2);
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(calls_seen == 1);
}

TEST_CASE("a child that keeps dying is restarted with backoff, replays still work meanwhile", "[proxy]") {
  Harness h(server_script([](const Json& m) -> std::vector<std::string> { return {answer(m["id"], text_content("ok"))}; }),
            RestartPolicy{std::chrono::milliseconds(60'000), std::chrono::milliseconds(60'000),
                          std::chrono::milliseconds(60'000), std::chrono::milliseconds(10'000)});
  REQUIRE(h.proxy->start().ok());
  REQUIRE(h.call("act", {{"n", 1}}).result["_meta"]["effectfence"]["replayed"] == false);

  h.kill_child(0);
  Reply restarted = h.call("act", {{"n", 2}});  // the first quick death restarts at once
  CHECK(restarted.result["content"][0]["text"] == "ok");
  h.kill_child(1);
  Reply backed_off = h.call("act", {{"n", 3}});  // the second in a row waits (60 s here)
  CHECK(backed_off.result["isError"] == true);
  CHECK_THAT(backed_off.result["content"][0]["text"].get<std::string>(), Catch::Contains("next start is in"));
  Reply replay = h.call("act", {{"n", 1}});
  CHECK(replay.result["_meta"]["effectfence"]["replayed"] == true);
  CHECK(h.launched() == 2);
  // The call turned away during the backoff was never admitted.
  const std::string intent = backed_off.result.value("_meta", Json::object()).value("effectfence", Json::object()).value("intent", "");
  auto identity = identify_call("act", {{"n", 3}}, Json::object(), "");
  auto status = h.fence->intent_status(identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::none);
  CHECK(intent.empty());
  CHECK(std::get<Stats>(h.fence->stats()).ledger.admitted == 2);
}

TEST_CASE("a child restarted by a call after its backoff is mirrored before the call: a tool it no longer "
          "declares read-only is fenced",
          "[proxy]") {
  // "act" is read-only in the first two children, and not in the third.
  std::atomic<int> handshakes{0};
  std::atomic<int> runs{0};
  Harness h(
      [&](const Json& m) -> std::vector<std::string> {
        const std::string method = m.value("method", "");
        if (method == "initialize") {
          ++handshakes;
          return {answer(m["id"], {{"protocolVersion", "2025-06-18"},
                                   {"capabilities", {{"tools", Json::object()}}},
                                   {"serverInfo", {{"name", "fake"}, {"version", "1"}}}})};
        }
        if (method == "tools/list") {
          const bool read_only = handshakes.load() < 3;
          Json tools = {tool_entry("act", {{"readOnlyHint", read_only}})};
          if (!read_only) tools.push_back(tool_entry("new_in_3"));
          return {answer(m["id"], {{"tools", tools}})};
        }
        if (method == "tools/call") return {answer(m["id"], text_content("acted " + std::to_string(++runs)))};
        return {};
      },
      RestartPolicy{std::chrono::milliseconds(60'000), std::chrono::milliseconds(300), std::chrono::milliseconds(300),
                    std::chrono::milliseconds(10'000)});
  REQUIRE(h.proxy->start().ok());
  REQUIRE(lists_act_read_only(*h.proxy));

  h.kill_child(0);  // restarted at once, to refresh the list: still read-only
  // Until the second child has answered its handshake: killed before it,
  // it would leave the third child the second handshake, and a list that
  // still calls "act" read-only.
  for (int i = 0; i < 1000 && handshakes.load() < 2; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(handshakes.load() == 2);
  REQUIRE(h.launched() == 2);
  h.kill_child(1);  // the second quick death: the refresh meets the backoff
  std::this_thread::sleep_for(500ms);
  REQUIRE(lists_act_read_only(*h.proxy));  // the last list it could read

  // Identical calls at once, each decided on the old list: the first to get
  // there starts the third child, which declares "act" a write; the others
  // find it mirrored already, and every one is fenced.
  std::vector<std::thread> callers;
  std::atomic<int> replayed_or_refused{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      Reply r = h.call("act", {{"amount", 5}});
      const Json note = r.result.value("_meta", Json::object()).value("effectfence", Json::object());
      if (note.value("replayed", false) || note.contains("refused")) ++replayed_or_refused;
    });
  }
  for (std::thread& caller : callers) caller.join();
  CHECK(runs == 1);
  CHECK(replayed_or_refused == 7);
  Reply retry = h.call("act", {{"amount", 5}});
  CHECK(retry.result["_meta"]["effectfence"]["replayed"] == true);
  CHECK(runs == 1);
  CHECK(h.launched() == 3);
  CHECK_FALSE(lists_act_read_only(*h.proxy));
  bool offers_new_tool = false;
  for (const Tool& tool : h.proxy->tools()) offers_new_tool = offers_new_tool || tool.name == "new_in_3";
  CHECK(offers_new_tool);
}

TEST_CASE("replays and refusals of fenced intents do not wait for a child that is still starting", "[proxy]") {
  std::atomic<int> handshakes{0};
  Harness h(
      [&handshakes, calls = server_script([](const Json& m) -> std::vector<std::string> {
         if (m["params"]["arguments"].value("fail", false)) {
           return {answer(m["id"], {{"content", Json::array()}, {"isError", true}})};
         }
         return {answer(m["id"], text_content("ok"))};
       })](const Json& m) -> std::vector<std::string> {
        // Every child after the first never finishes its handshake.
        if (m.value("method", "") == "initialize" && handshakes.fetch_add(1) > 0) return {};
        return calls(m);
      },
      RestartPolicy{std::chrono::milliseconds(10'000), std::chrono::milliseconds(1'000),
                    std::chrono::milliseconds(30'000), std::chrono::milliseconds(60'000)});
  REQUIRE(h.proxy->start().ok());
  REQUIRE(h.call("act", {{"n", 1}}).result["_meta"]["effectfence"]["replayed"] == false);
  REQUIRE(h.call("act", {{"fail", true}}).result["_meta"]["effectfence"]["fenced"] == "failed");
  h.kill_child(0);

  // A new call starts the next child, whose handshake hangs (for 60 s here).
  std::thread starter([&] { h.call("act", {{"n", 2}}); });
  while (handshakes.load() < 2) std::this_thread::sleep_for(5ms);

  const auto before = std::chrono::steady_clock::now();
  Reply replay = h.call("act", {{"n", 1}});
  Reply fenced = h.call("act", {{"fail", true}});
  CHECK(std::chrono::steady_clock::now() - before < 5s);
  CHECK(replay.result["_meta"]["effectfence"]["replayed"] == true);
  CHECK(replay.result["content"][0]["text"] == "ok");
  CHECK(fenced.result["_meta"]["effectfence"]["refused"] == "prior_failure");
  // Stopping gives the hanging handshake up at once, not after its 60 s.
  const auto stopping = std::chrono::steady_clock::now();
  h.proxy->stop();
  starter.join();
  CHECK(std::chrono::steady_clock::now() - stopping < 30s);
}

TEST_CASE("a result with a 64-bit id reaches the agent exactly: passed through, or returned unrecorded and never "
          "run again",
          "[proxy]") {
  testing::TempDir dir;
  Settings settings;
  settings.ledger_path = (dir.path() / "ledger.sqlite").string();
  std::atomic<int> runs{0};
  auto child = server_script([&](const Json& m) -> std::vector<std::string> {
    ++runs;
    // Written by hand: a 64-bit id no double can hold.
    return {R"({"jsonrpc":"2.0","id":)" + m["id"].dump() +
            R"(,"result":{"content":[{"type":"text","text":"created"}],"structuredContent":{"order_id":1790000000000000001}}})"};
  });
  Harness h(child, {}, settings);
  REQUIRE(h.proxy->start().ok());

  Reply read = h.call("look", {{"n", 1}});  // read-only: passes straight through
  REQUIRE_FALSE(read.error);
  CHECK(read.result["structuredContent"].dump() == R"({"order_id":1790000000000000001})");

  Reply ran = h.call("act", {{"n", 1}});
  REQUIRE_FALSE(ran.error);
  CHECK(ran.result["structuredContent"].dump() == R"({"order_id":1790000000000000001})");
  CHECK(ran.result["_meta"]["effectfence"]["recorded"] == false);
  Reply again = h.call("act", {{"n", 1}});
  CHECK(again.result["isError"] == true);
  CHECK(again.result["_meta"]["effectfence"]["refused"] == "prior_failure");  // fenced for a person to check
  CHECK(runs == 2);  // the look, and the act once

  // The result it gave is in the audit log, digit for digit, for that person.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(settings.ledger_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT detail ->> '$.result_json' FROM events WHERE kind = 'aborted'", -1, &q,
                             nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
  const std::string kept = text ? text : "";
  CHECK_THAT(kept, Catch::Contains(R"("structuredContent":{"order_id":1790000000000000001})"));
  CHECK(sqlite3_step(q) == SQLITE_DONE);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

TEST_CASE("a result the ledger cannot record is returned as such, and the call is never run again",
          "[proxy]") {
  testing::TempDir dir;
  const std::string ledger = (dir.path() / "ledger.sqlite").string();
  Settings settings;
  settings.ledger_path = ledger;
  settings.busy_timeout_ms = 50;  // the commit and its fallback give up soon
  settings.lease_ttl_ms = 200;
  sqlite3* blocker = nullptr;
  std::atomic<int> runs{0};
  Harness h(server_script([&](const Json& m) -> std::vector<std::string> {
              ++runs;
              // While the tool runs, another process locks the ledger (and keeps it).
              REQUIRE(sqlite3_open(ledger.c_str(), &blocker) == SQLITE_OK);
              sqlite3_busy_timeout(blocker, 10000);  // the fence's own writes may hold the lock a moment
              REQUIRE(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
              return {answer(m["id"], text_content("charged"))};
            }),
            {}, settings);
  REQUIRE(h.proxy->start().ok());
  Reply ran = h.call("act", {{"order", 7}});
  REQUIRE_FALSE(ran.error);
  CHECK(ran.result["content"][0]["text"] == "charged");
  const Json& note = ran.result["_meta"]["effectfence"];
  CHECK(note["recorded"] == false);
  CHECK(note["refused"] == "ledger_busy");
  CHECK_THAT(note["explanation"].get<std::string>(), Catch::Contains("The tool ran and this is its result"));
  CHECK_THAT(note["explanation"].get<std::string>(), !Catch::Contains("do not run the tool"));

  sqlite3_exec(blocker, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(blocker);
  std::this_thread::sleep_for(400ms);  // its lease has run out; its holder, this process, runs on
  Reply again = h.call("act", {{"order", 7}});
  CHECK(again.result["_meta"]["effectfence"]["refused"] == "in_flight");
  CHECK(runs == 1);
}

TEST_CASE("the child hears notifications/initialized before any other request, every time", "[proxy]") {
  // Servers that enforce the handshake (the Python SDK's) refuse a request
  // that arrives before initialized.
  for (int round = 0; round < 30; ++round) {
    auto initialized = std::make_shared<std::atomic<bool>>(false);
    FakeChild::Script strict = [initialized, inner = server_script([](const Json& m) -> std::vector<std::string> {
                                  return {answer(m["id"], text_content("acted"))};
                                })](const Json& m) -> std::vector<std::string> {
      const std::string method = m.value("method", "");
      if (method == "notifications/initialized") *initialized = true;
      if (method != "initialize" && m.contains("id") && !*initialized) {
        return {jsonrpc::serialize(jsonrpc::error_response(m["id"], -32602, "request before initialization"))};
      }
      return inner(m);
    };
    Harness h(strict);
    const Status started = h.proxy->start();
    INFO("round " << round << ": " << started.message());
    REQUIRE(started.ok());
  }
}

TEST_CASE("a call cancelled before it reaches the child is never sent, and an identical call runs later",
          "[proxy]") {
  std::atomic<int> runs{0};
  Harness h(server_script([&](const Json& m) -> std::vector<std::string> {
    ++runs;
    return {answer(m["id"], text_content("acted"))};
  }));
  REQUIRE(h.proxy->start().ok());
  CallContext cancelled(Json(1), Json::object());
  cancelled.cancel();  // the agent's notifications/cancelled came while it was being admitted
  Reply dropped = h.proxy->call("act", {{"n", 1}}, cancelled);
  REQUIRE(dropped.error);
  CHECK(runs == 0);
  Reply later = h.call("act", {{"n", 1}});
  REQUIRE_FALSE(later.error);
  CHECK(later.result["_meta"]["effectfence"]["replayed"] == false);
  CHECK(runs == 1);
}

TEST_CASE("a tool error fences by default, a protocol refusal by the child releases", "[proxy]") {
  Harness h(server_script([](const Json& m) -> std::vector<std::string> {
    if (m["params"]["arguments"].value("bad", false)) {
      return {jsonrpc::error_response(m["id"], jsonrpc::kMethodNotFound, "no such method").dump()};
    }
    // Some servers check a tool's output against its outputSchema after the
    // tool ran, and report a mismatch as invalid params.
    if (m["params"]["arguments"].value("ran", false)) {
      return {jsonrpc::error_response(m["id"], jsonrpc::kInvalidParams, "output validation error").dump()};
    }
    // Blocks whose "type" is no string, beside a text block.
    if (m["params"]["arguments"].value("odd_type", false)) {
      Json odd = {{"isError", true},
                  {"content", Json::array({Json{{"type", nullptr}, {"text", "card"}}, Json{{"type", 7}},
                                           Json{{"type", "text"}, {"text", "declined"}}})}};
      return {answer(m["id"], odd)};
    }
    // A long error whose excerpt limit (2000 bytes) falls inside "é".
    Json failed = text_content(m["params"]["arguments"].value("long", false) ? std::string(1999, 'a') + "\xc3\xa9"
                                                                              : std::string("disk full"));
    failed["isError"] = true;
    return {answer(m["id"], failed)};
  }));
  REQUIRE(h.proxy->start().ok());
  Reply failed = h.call("act", {{"x", 1}});
  CHECK(failed.result["isError"] == true);
  CHECK(failed.result["content"][0]["text"] == "disk full");
  Reply retry = h.call("act", {{"x", 1}});
  CHECK(retry.result["_meta"]["effectfence"]["refused"] == "prior_failure");
  CHECK_THAT(retry.result["content"][0]["text"].get<std::string>(), Catch::Contains("disk full"));

  Reply refused = h.call("act", {{"bad", true}});
  REQUIRE(refused.error);
  CHECK(refused.error->code == jsonrpc::kMethodNotFound);
  CHECK(refused.error->message == "no such method");
  auto identity = identify_call("act", {{"bad", true}}, Json::object(), "");
  auto status = h.fence->intent_status(identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::cleared);

  // Invalid params may come after the tool ran: fenced like a tool error.
  Reply after_run = h.call("act", {{"ran", true}});
  REQUIRE(after_run.error);
  CHECK(after_run.error->code == jsonrpc::kInvalidParams);
  auto ran_identity = identify_call("act", {{"ran", true}}, Json::object(), "");
  auto ran_status = h.fence->intent_status(ran_identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(ran_status));
  CHECK(std::get<IntentStatus>(ran_status).state == IntentState::failed);
  CHECK(h.call("act", {{"ran", true}}).result["_meta"]["effectfence"]["refused"] == "prior_failure");

  // A tool error with blocks of odd types is fenced and answered like any
  // other, its text blocks kept as the reason.
  Reply odd = h.call("act", {{"odd_type", true}});
  CHECK(odd.result["isError"] == true);
  CHECK(odd.result["_meta"]["effectfence"]["fenced"] == "failed");
  auto odd_identity = identify_call("act", {{"odd_type", true}}, Json::object(), "");
  auto odd_status = h.fence->intent_status(odd_identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(odd_status));
  CHECK(std::get<IntentStatus>(odd_status).state == IntentState::failed);
  CHECK_THAT(std::get<IntentStatus>(odd_status).reason, Catch::Contains("declined"));

  // The excerpt kept as the reason is cut on a character boundary: the
  // ledger holds text, and reports of it must not break on half a character.
  REQUIRE(h.call("act", {{"long", true}}).result["isError"] == true);
  auto long_identity = identify_call("act", {{"long", true}}, Json::object(), "");
  auto long_status = h.fence->intent_status(long_identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(long_status));
  const std::string reason = std::get<IntentStatus>(long_status).reason;
  CHECK_THAT(reason, Catch::EndsWith("aaa..."));
  CHECK_FALSE(jsonrpc::first_invalid_utf8(reason));
}

namespace {

// The agent's side of a Server the proxy is attached to: what it was sent.
struct AgentSide {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<Json> lines;
  Server::Sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(Json::parse(line));
      arrived.notify_all();
    };
  }
  // The first request with this method, waiting up to timeout; null if none came.
  Json request(const std::string& method, std::chrono::milliseconds timeout = 10s) {
    return first(method, /*with_id=*/true, timeout);
  }
  // The first notification with this method, waiting up to 10 s; null if none came.
  Json notification(const std::string& method) { return first(method, /*with_id=*/false, 10s); }

 private:
  Json first(const std::string& method, bool with_id, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    Json found;
    arrived.wait_for(lock, timeout, [&] {
      for (const Json& m : lines) {
        if (m.value("method", "") == method && m.contains("id") == with_id) found = m;
      }
      return !found.is_null();
    });
    return found;
  }
};

// A child that, asked to act, asks its client for sampling (and for
// something no client offers) and answers with what it got.
struct AskingChild {
  std::mutex mutex;
  std::condition_variable changed;
  Json offered;                    // the client capabilities in initialize
  Json offered_version;            // and the protocol revision
  std::vector<Json> answers;       // the client's answers to its requests
  std::vector<std::string> notes;  // notifications it received
  int calls = 0;
  Json call_id;

  FakeChild::Script script() {
    return [this](const Json& m) -> std::vector<std::string> {
      std::lock_guard<std::mutex> lock(mutex);
      const std::string method = m.value("method", "");
      changed.notify_all();
      if (method == "initialize") {
        offered = m["params"]["capabilities"];
        offered_version = m["params"]["protocolVersion"];
        return {answer(m["id"], {{"protocolVersion", "2025-06-18"},
                                 {"capabilities", {{"tools", Json::object()}}},
                                 {"serverInfo", {{"name", "asking"}, {"version", "1"}}}})};
      }
      if (method == "tools/list") return {answer(m["id"], {{"tools", {tool_entry("act")}}})};
      if (method == "tools/call" && m["params"]["arguments"].value("cancel", false)) {
        // Asks, then gives up on it at once (its own timeout, say).
        return {jsonrpc::request("c-9", "sampling/createMessage", {{"maxTokens", 1}}).dump(),
                jsonrpc::notification("notifications/cancelled", {{"requestId", "c-9"}, {"reason", "timed out"}}).dump(),
                answer(m["id"], text_content("asked, then cancelled"))};
      }
      if (method == "tools/call") {
        ++calls;
        call_id = m["id"];
        return {jsonrpc::request("c-8", "foo/bar", Json::object()).dump(),
                jsonrpc::request("c-7", "sampling/createMessage", {{"maxTokens", 3}}).dump()};
      }
      if (method.rfind("notifications/", 0) == 0) {
        notes.push_back(method);
        return {};
      }
      answers.push_back(m);
      if (m["id"] != "c-7") return {};
      return {answer(call_id, text_content(m.contains("result") ? "agent said " + m["result"].dump()
                                                                 : "agent refused " + m["error"].dump()))};
    };
  }
};

// The agent's initialize with these client capabilities, as wrap's server
// hands it to the proxy.
void agent_initializes(Harness& h, Json capabilities) {
  h.proxy->on_initialize({{"protocolVersion", "2025-11-25"},
                          {"capabilities", std::move(capabilities)},
                          {"clientInfo", {{"name", "agent"}}}});
}

// A proxy in front of an AskingChild, with wrap's server on the agent's
// side, after the agent's initialize with these capabilities.
struct RelayFixture {
  explicit RelayFixture(Json capabilities) {
    h.proxy->attach(&server);
    agent_initializes(h, std::move(capabilities));
  }
  ~RelayFixture() { h.proxy->attach(nullptr); }

  // Starts the child, as wrap does on the agent's initialize, and has the
  // agent say notifications/initialized. False if the child did not start.
  bool agent_ready() {
    if (!h.proxy->start().ok()) return false;
    server.handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
    return true;
  }

  AskingChild asking;
  Harness h{asking.script()};
  AgentSide agent;
  Server server{ServerInfo{"wrap", "", "1", ""}, {}, agent.sink(), h.log};
};

}  // namespace

TEST_CASE("the child is offered the agent's roots, sampling and elicitation, its sampling request during a fenced "
          "call reaches the agent under wrap's id and the answer comes back",
          "[proxy][client-features]") {
  RelayFixture f(Json{{"sampling", Json::object()}, {"roots", {{"listChanged", true}}}, {"experimental", {{"x", 1}}}});
  REQUIRE(f.agent_ready());
  {
    std::lock_guard<std::mutex> lock(f.asking.mutex);
    CHECK(f.asking.offered == Json{{"sampling", Json::object()}, {"roots", {{"listChanged", true}}}});
  }

  Reply first;
  std::thread caller([&] { first = f.h.call("act", {{"n", 1}}); });
  const Json asked = f.agent.request("sampling/createMessage");
  REQUIRE_FALSE(asked.is_null());
  CHECK(asked["id"] != "c-7");
  CHECK(asked["params"] == Json{{"maxTokens", 3}});
  // The child sent foo/bar before the sampling request, on the same stream:
  // had it been relayed, it would be here already.
  CHECK(f.agent.request("foo/bar", 0ms).is_null() == true);
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(asked["id"], {{"text", "42"}})));
  caller.join();
  REQUIRE_FALSE(first.error);
  CHECK(first.result["content"][0]["text"] == "agent said {\"text\":\"42\"}");
  CHECK(first.result["_meta"]["effectfence"]["replayed"] == false);
  {
    std::lock_guard<std::mutex> lock(f.asking.mutex);
    REQUIRE(f.asking.answers.size() == 2);
    CHECK(f.asking.answers[0]["id"] == "c-8");  // no client offers foo/bar
    CHECK(f.asking.answers[0]["error"]["code"] == jsonrpc::kMethodNotFound);
    CHECK(f.asking.answers[1] == jsonrpc::result_response("c-7", {{"text", "42"}}));
  }
  Reply again = f.h.call("act", {{"n", 1}});
  CHECK(again.result["_meta"]["effectfence"]["replayed"] == true);

  // The agent's roots changed: the child hears of it.
  f.h.proxy->on_agent_notification("notifications/roots/list_changed", Json::object());
  {
    std::unique_lock<std::mutex> lock(f.asking.mutex);
    CHECK(f.asking.changed.wait_for(lock, 10s, [&] {
      return std::count(f.asking.notes.begin(), f.asking.notes.end(), "notifications/roots/list_changed") == 1;
    }));
    CHECK(f.asking.calls == 1);
  }
}

TEST_CASE("a relayed request the child cancels is cancelled at the agent, and the agent's late answer is dropped",
          "[proxy][client-features]") {
  RelayFixture f(Json{{"sampling", Json::object()}});
  REQUIRE(f.agent_ready());
  Reply done = f.h.call("act", {{"cancel", true}});
  CHECK(done.result["content"][0]["text"] == "asked, then cancelled");
  const Json asked = f.agent.request("sampling/createMessage");
  REQUIRE_FALSE(asked.is_null());
  const Json cancelled = f.agent.notification("notifications/cancelled");
  REQUIRE_FALSE(cancelled.is_null());
  CHECK(cancelled["params"]["requestId"] == asked["id"]);
  CHECK(cancelled["params"]["reason"] == "timed out");
  CHECK(f.server.requests_in_flight() == 0);
  f.server.handle_line(jsonrpc::serialize(jsonrpc::result_response(asked["id"], {{"text", "late"}})));
  std::lock_guard<std::mutex> lock(f.asking.mutex);
  for (const Json& m : f.asking.answers) CHECK(m["id"] != "c-9");
}

TEST_CASE("an agent without sampling: the child is offered nothing and its request is refused -32601",
          "[proxy][client-features]") {
  RelayFixture f(Json{{"roots", Json::object()}});
  REQUIRE(f.agent_ready());
  Reply refused = f.h.call("act", {{"n", 1}});
  CHECK_THAT(refused.result["content"][0]["text"].get<std::string>(),
             Catch::StartsWith("agent refused") && Catch::Contains("-32601"));
  {
    std::lock_guard<std::mutex> lock(f.agent.mutex);
    for (const Json& m : f.agent.lines) CHECK_FALSE(m.contains("method"));
  }
  std::lock_guard<std::mutex> lock(f.asking.mutex);
  CHECK(f.asking.offered == Json{{"roots", Json::object()}});
}

TEST_CASE("the agent's pending request fails when the server drains, and the child gets an error", "[proxy][client-features]") {
  AskingChild asking;
  Harness h(asking.script());
  AgentSide agent;
  auto server = std::make_unique<Server>(ServerInfo{"wrap", "", "1", ""}, std::vector<Tool>{}, agent.sink(), h.log);
  h.proxy->attach(server.get());
  agent_initializes(h, {{"sampling", Json::object()}});
  REQUIRE(h.proxy->start().ok());
  server->handle_line(jsonrpc::serialize(jsonrpc::notification("notifications/initialized", Json::object())));
  Reply result;
  std::thread caller([&] { result = h.call("act", {{"n", 1}}); });
  REQUIRE_FALSE(agent.request("sampling/createMessage").is_null());
  server->drain();  // the agent went away without answering
  caller.join();
  CHECK_THAT(result.result["content"][0]["text"].get<std::string>(), Catch::StartsWith("agent refused"));
  h.proxy->attach(nullptr);
}

TEST_CASE("a restarted child is offered the same client capabilities", "[proxy][client-features]") {
  AskingChild asking;
  Harness h(asking.script());
  const Json offered = {{"roots", {{"listChanged", true}}}, {"elicitation", {{"form", Json::object()}}}};
  agent_initializes(h, offered);
  REQUIRE(h.proxy->start().ok());
  {
    // Forgotten before the kill: the restart may come as soon as the death is seen.
    std::lock_guard<std::mutex> lock(asking.mutex);
    asking.offered = nullptr;
  }
  h.kill_child(0);
  h.call("act", {{"n", 1}});  // restarts the child; no agent is attached, so its sampling request is refused
  CHECK(h.launched() == 2);
  std::lock_guard<std::mutex> lock(asking.mutex);
  CHECK(asking.offered == offered);
}

TEST_CASE("the child is offered the protocol revision the agent was answered with, also when restarted",
          "[proxy][client-features]") {
  {
    AskingChild asking;
    Harness h(asking.script());
    h.proxy->on_initialize({{"protocolVersion", "2025-03-26"}, {"capabilities", Json::object()}});
    REQUIRE(h.proxy->start().ok());
    {
      std::lock_guard<std::mutex> lock(asking.mutex);
      CHECK(asking.offered_version == "2025-03-26");
      asking.offered_version = nullptr;
    }
    h.kill_child(0);
    h.call("act", {{"n", 1}});  // restarts the child
    CHECK(h.launched() == 2);
    std::lock_guard<std::mutex> lock(asking.mutex);
    CHECK(asking.offered_version == "2025-03-26");
  }
  // An agent asking for a revision nobody here speaks is answered with the
  // newest, and so is the child offered it.
  AskingChild asking;
  Harness h(asking.script());
  h.proxy->on_initialize({{"protocolVersion", "1999-01-01"}, {"capabilities", Json::object()}});
  REQUIRE(h.proxy->start().ok());
  std::lock_guard<std::mutex> lock(asking.mutex);
  CHECK(asking.offered_version == negotiate_protocol_version("1999-01-01"));
  CHECK(asking.offered_version == "2025-11-25");
}

TEST_CASE("a call to a tool a restarted child no longer offers is refused before it is admitted", "[proxy]") {
  // The first child offers "act"; every later one offers only "other".
  auto handshakes = std::make_shared<std::atomic<int>>(0);
  auto runs = std::make_shared<std::atomic<int>>(0);
  Harness h([handshakes, runs](const Json& m) -> std::vector<std::string> {
    const std::string method = m.value("method", "");
    if (method == "initialize") ++*handshakes;
    if (method == "tools/list") {
      return {answer(m["id"], {{"tools", {tool_entry(handshakes->load() == 1 ? "act" : "other")}}})};
    }
    if (method == "tools/call") {
      ++*runs;
      return {jsonrpc::error_response(m["id"], jsonrpc::kInvalidParams, "unknown tool").dump()};
    }
    return server_script([](const Json&) { return std::vector<std::string>{}; })(m);
  });
  REQUIRE(h.proxy->start().ok());
  h.kill_child(0);
  // Asked for on the first child's list; the call starts the second child.
  Reply refused = h.call("act", {{"x", 1}});
  REQUIRE(refused.error);
  CHECK(refused.error->code == jsonrpc::kInvalidParams);
  CHECK_THAT(refused.error->message, Catch::Contains("no longer offers it"));
  CHECK(runs->load() == 0);
  auto identity = identify_call("act", {{"x", 1}}, Json::object(), "");
  auto status = h.fence->intent_status(identity->intent);
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::none);  // nothing admitted, nothing fenced
}

TEST_CASE("a stop does not wait for a child that never answers a refresh of its tool list", "[proxy]") {
  // The child announces a changed tool list, then answers no tools/list but the first.
  auto lists = std::make_shared<std::atomic<int>>(0);
  Harness h([lists](const Json& m) -> std::vector<std::string> {
    const std::string method = m.value("method", "");
    if (method == "notifications/initialized") {
      return {jsonrpc::serialize(jsonrpc::notification("notifications/tools/list_changed", Json::object()))};
    }
    if (method == "tools/list" && lists->fetch_add(1) > 0) return {};
    return server_script([](const Json&) { return std::vector<std::string>{}; })(m);
  });
  REQUIRE(h.proxy->start().ok());
  for (int i = 0; i < 1000 && lists->load() < 2; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(lists->load() >= 2);  // the refresh is waiting on the child now
  // Its wait ends with the stop, not with the 60 s handshake timeout.
  auto stopped = std::async(std::launch::async, [&] { h.proxy->stop(); });
  CHECK(stopped.wait_for(20s) == std::future_status::ready);
}

TEST_CASE("a child that finishes starting after a stop is never used", "[upstream]") {
  Logger log{"upstream-test", LogLevel::error};
  FakeChild first(server_script([](const Json&) { return std::vector<std::string>{}; }));
  FakeChild second(server_script([](const Json&) { return std::vector<std::string>{}; }));
  std::mutex mutex;
  std::condition_variable changed;
  int launches = 0;
  bool release_second = false;
  bool first_died = false;
  Launcher launcher = [&](McpClient::Handlers handlers) {
    std::unique_lock<std::mutex> lock(mutex);
    ++launches;
    changed.notify_all();
    if (launches == 1) return first.link(std::move(handlers), log);
    changed.wait(lock, [&] { return release_second; });  // a slow restart
    return second.link(std::move(handlers), log);
  };
  Upstream::Events events;
  events.on_death = [&](uint64_t, const std::string&) {
    std::lock_guard<std::mutex> lock(mutex);
    first_died = true;
    changed.notify_all();
  };
  Upstream upstream(launcher, Json{{"name", "test"}, {"version", "1"}}, log, events);
  REQUIRE(upstream.start(ClientOffer{}).ok());
  first.die();
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return first_died; }));
  }
  StatusOr<std::shared_ptr<Upstream::Session>> restarted = std::make_shared<Upstream::Session>();
  std::thread caller([&] { restarted = upstream.acquire(); });
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return launches == 2; }));
  }
  upstream.stop_now();  // shutdown while the second child is starting
  {
    std::lock_guard<std::mutex> lock(mutex);
    release_second = true;
    changed.notify_all();
  }
  caller.join();
  CHECK_FALSE(restarted.ok());
  CHECK_THAT(restarted.status().message(), Catch::Contains("shutting down"));
  CHECK_FALSE(upstream.acquire().ok());
}
