// The shared server's HTTP front door: any bytes as a run of HTTP requests
// handed to shared::HttpTransport::handle (the Host/Origin/token checks,
// sessions, Idempotency-Key deliveries, the JSON-RPC body) with a session
// server per initialize carrying the fence tools over a real SQLite ledger,
// as `serve --shared` builds it. No socket: httplib's own parsing of the
// wire is not what is tested here.
//
// Input: requests separated by a line "=====". Each is "METHOD PATH", then
// "Name: value" header lines, a blank line, and the body (the rest). In
// header values $TOKEN is the server's token, $PORT its port, $SESSION the
// id of the last session opened (tests/fuzz/record_seeds.mjs records seeds
// in this form from the SDK's own traffic).
//
// Oracles, with the body read by an independent recognizer (json_grammar.h):
//   - every response but 202 and a DELETE's 200 carries one JSON-RPC 2.0
//     response (in an SSE event when the client asked for one), whose error
//     has a named code;
//   - a POSTed request with one readable id is answered under that id, or,
//     when refused before its body was read (401, 403, 404, ...), under
//     id null; never with 202; a 200 always under its id;
//   - nothing reaches the ledger but a readable tools/call whose arguments
//     the tool took, or the end of a session (its admissions are fenced);
//   - no exception escapes the handler.
// Planted bug (EFFECTFENCE_FUZZ_PLANT): a body the server refused with 400
// is recorded in the ledger anyway (as an admission of its own).
#include <fcntl.h>
#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "front_door.h"
#include "json_grammar.h"
#include "mcp/fence_tools.h"
#include "mcp/server.h"
#include "mcp/session_admissions.h"
#include "oracle.h"
#include "shared_server/http_transport.h"

using namespace effectfence;
using effectfence::fuzz::Grammar;
using effectfence::fuzz::require;

namespace {

constexpr const char* kToken = "fuzz-token";

mcp::Logger& quiet_log() {
  static mcp::Logger* log = new mcp::Logger("fuzz_http", mcp::LogLevel::error, ::open("/dev/null", O_WRONLY));
  return *log;
}

std::string shown(std::string_view text) { return std::string(text.substr(0, 300)); }

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

struct Parsed {
  std::string method, path, body;
  std::vector<std::pair<std::string, std::string>> headers;
};

std::vector<Parsed> requests_of(std::string_view input) {
  std::vector<Parsed> out;
  const std::string_view separator = "\n=====\n";
  size_t start = 0;
  while (start <= input.size() && out.size() < 64) {
    size_t end = input.find(separator, start);
    if (end == std::string_view::npos) end = input.size();
    std::string_view text = input.substr(start, end - start);
    start = end + separator.size();
    Parsed p;
    const size_t head_end = text.find("\n\n");
    std::string_view head = text.substr(0, head_end);
    p.body = head_end == std::string_view::npos ? "" : std::string(text.substr(head_end + 2));
    size_t line_start = 0;
    bool first = true;
    while (line_start <= head.size()) {
      size_t line_end = head.find('\n', line_start);
      if (line_end == std::string_view::npos) line_end = head.size();
      std::string_view line = head.substr(line_start, line_end - line_start);
      line_start = line_end + 1;
      if (first) {
        const size_t space = line.find(' ');
        p.method = std::string(line.substr(0, space));
        p.path = space == std::string_view::npos ? "" : std::string(line.substr(space + 1));
        first = false;
      } else if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        p.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// The JSON-RPC message a 200 carries: the body, or the data of its one SSE event.
Json message_of(const httplib::Response& res, const std::string& context) {
  std::string text = res.body;
  if (res.get_header_value("Content-Type").find("text/event-stream") != std::string::npos) {
    const std::string prefix = "event: message\ndata: ";
    require(text.compare(0, prefix.size(), prefix) == 0 && text.size() >= prefix.size() + 2 &&
                text.compare(text.size() - 2, 2, "\n\n") == 0,
            "an event stream that is not one message event" + context);
    text = text.substr(prefix.size(), text.size() - prefix.size() - 2);
  }
  Json message = Json::parse(text, nullptr, false);
  require(!message.is_discarded(), "an HTTP answer whose body is not JSON: " + shown(res.body) + context);
  return message;
}

// The planted bug: what a handler that records a message before it has
// validated it would leave in the ledger.
void planted_record(Fence& fence, const std::string& body) {
  PrepareRequest req;
  req.intent = "planted:" + sha256_hex(body).substr(0, 16);
  req.domain = "planted";
  req.tool = "planted";
  req.args = Json::object();
  req.agent = "planted";
  (void)fence.prepare(req);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  fuzz::FuzzLedger& ledger = fuzz::FuzzLedger::get();
  Fence& fence = ledger.fence();
  auto owners = std::make_shared<mcp::AdmissionOwners>(fence);

  shared::HttpOptions options;
  options.token = kToken;
  options.max_running_calls = 1;
  shared::HttpTransport transport(
      options,
      [&](mcp::Server::Sink sink) {
        // As serve --shared builds a session (cli/serve_shared.cc, fence_session).
        auto admissions = std::make_shared<mcp::SessionAdmissions>(owners);
        shared::HttpTransport::SessionServer session;
        session.server = std::make_unique<mcp::Server>(mcp::ServerInfo{"effectfence", "fuzz", "0", ""},
                                                       mcp::fence_tools(fence, quiet_log(), admissions),
                                                       std::move(sink), quiet_log());
        session.ended = [admissions] { admissions->fence_all("the fuzzed session ended"); };
        return session;
      },
      quiet_log());

  std::string session_id = "none-yet";
  for (Parsed& p : requests_of(input)) {
    httplib::Request req;
    req.method = p.method;
    req.path = p.path;
    req.body = p.body;
    req.remote_addr = "127.0.0.1";
    for (auto& [name, value] : p.headers) {
      replace_all(value, "$TOKEN", kToken);
      replace_all(value, "$PORT", "0");  // never bound: the transport's port is 0
      replace_all(value, "$SESSION", session_id);
      req.headers.emplace(name, value);
    }
    const std::string context = " (" + p.method + " " + shown(p.path) + ": " + shown(p.body) + ")";

    httplib::Response res;
    const int64_t version_before = ledger.version();
    try {
      transport.handle(req, res);
    } catch (const std::exception& e) {
      fuzz::oracle_failed(std::string("the handler threw: ") + e.what() + context);
    }
    if (fuzz::planted() && res.status == 400) planted_record(fence, p.body);
    const bool ledger_changed = ledger.version() != version_before;

    require(res.status >= 200 && res.status < 600, "no status set" + context);
    if (res.has_header("Mcp-Session-Id")) session_id = res.get_header_value("Mcp-Session-Id");

    const Grammar::Reading reading = Grammar(p.body).read();
    const bool post = p.method == "POST" && p.path == "/mcp";
    const bool routed = p.path == "/mcp" && (post || p.method == "DELETE" || p.method == "GET");
    const bool request = post && reading.readable_request();
    std::optional<Json> answer;
    if (res.status == 202) {
      require(!request, "a request with id " + (request ? reading.id->dump() : "") + " answered 202" + context);
      require(res.body.empty(), "a 202 with a body" + context);
    } else if (res.status == 404 && !routed) {
      // Not a route of this server.
    } else if (res.status == 200 && p.method == "DELETE") {
      require(res.body.empty(), "a session ended with a body: " + shown(res.body) + context);
    } else {
      answer = message_of(res, context);
      fuzz::check_answer(*answer, shown(res.body) + context);
      if (request) {
        const Json& id = (*answer)["id"];
        require(id == *reading.id || (res.status != 200 && id.is_null()),
                "a request with id " + reading.id->dump() + " answered " + std::to_string(res.status) +
                    " under id " + id.dump() + context);
      }
    }
    if (ledger_changed) {
      const bool call_taken = request && reading.method_name == "tools/call" && res.status == 200 && answer &&
                              fuzz::took_arguments(*answer);
      const bool session_ended = p.method == "DELETE" && res.status == 200;
      require(call_taken || session_ended, "the ledger changed for a " + std::to_string(res.status) +
                                               " that took no tool call" + context);
    }
  }
  return 0;
}
