// The stdio front door of `serve` (`wrap` reads its client through the
// same splitter and mcp::Server; its proxied tools are not here): any
// bytes as what a client writes to the server's stdin, split into lines
// by mcp::LineSplitter (a small size limit, so oversized lines are
// reached too) and handed to an mcp::Server carrying the fence tools over
// a real SQLite ledger, one line at a time, each drained before the next.
//
// Oracles, with what each line says read by an independent recognizer
// (json_grammar.h), not by the code under test:
//   - the splitter gives back the input's lines, byte for byte;
//   - every answer is a JSON-RPC 2.0 response whose error, if any, has a
//     named code and a message;
//   - a request with one readable id gets exactly one answer, under that id;
//   - a line that is not JSON at all gets exactly one answer: a -32700
//     parse error under id null (unless a number in it overflows a double,
//     which the server reads past to find an id, malformed or not);
//   - a notification gets no answer;
//   - nothing reaches the ledger for a line other than a readable
//     tools/call request whose arguments the tool took.
// Planted bug (EFFECTFENCE_FUZZ_PLANT): every answer is written twice.
#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "front_door.h"
#include "json_grammar.h"
#include "mcp/fence_tools.h"
#include "mcp/line_io.h"
#include "mcp/server.h"
#include "oracle.h"

using namespace effectfence;
using effectfence::fuzz::Grammar;
using effectfence::fuzz::require;

namespace {

constexpr size_t kLineLimit = 2048;  // small, so the fuzzer reaches oversized lines
constexpr size_t kKeptPrefix = 512;

mcp::Logger& quiet_log() {
  static mcp::Logger* log = new mcp::Logger("fuzz_stdio", mcp::LogLevel::error, ::open("/dev/null", O_WRONLY));
  return *log;
}

// The input's lines as a reader that knows nothing of LineSplitter sees
// them: split at "\n", one "\r" before it dropped; the last line even
// without its newline.
std::vector<std::string> lines_of(std::string_view input) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    std::string line(input.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

std::string shown(std::string_view text) { return std::string(text.substr(0, 300)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  fuzz::FuzzLedger& ledger = fuzz::FuzzLedger::get();

  std::mutex mutex;
  std::vector<std::string> sent;  // every line the server wrote, in order
  auto sink = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    sent.push_back(line);
    if (fuzz::planted()) sent.push_back(line);
  };
  // The tools hold no session state over stdio: built once, copied into
  // each input's server.
  static const std::vector<mcp::Tool> tools = mcp::fence_tools(ledger.fence(), quiet_log());
  mcp::Server server(mcp::ServerInfo{"effectfence", "fuzz", "0", ""}, tools, sink, quiet_log());

  mcp::LineSplitter splitter(kLineLimit, kKeptPrefix);
  splitter.feed(input);
  std::vector<mcp::Line> split;
  while (std::optional<mcp::Line> line = splitter.next()) split.push_back(std::move(*line));
  if (std::optional<mcp::Line> last = splitter.finish()) split.push_back(std::move(*last));

  const std::vector<std::string> expected = lines_of(input);
  require(split.size() == expected.size(), "the splitter found " + std::to_string(split.size()) +
                                                " lines in input of " + std::to_string(expected.size()));
  for (size_t i = 0; i < split.size(); ++i) {
    const mcp::Line& line = split[i];
    const std::string& want = expected[i];
    const bool too_long = want.size() > kLineLimit;
    require(line.too_long == too_long, "line " + std::to_string(i) + " of " + std::to_string(want.size()) +
                                           " bytes: too_long is " + (line.too_long ? "true" : "false"));
    if (too_long) {
      require(want.compare(0, line.text.size(), line.text) == 0 && line.text.size() <= kKeptPrefix,
              "an oversized line's kept prefix is not its start");
      require(line.tail.size() <= want.size() && want.compare(want.size() - line.tail.size(), line.tail.size(),
                                                              line.tail) == 0,
              "an oversized line's kept tail is not its end");
    } else {
      require(line.text == want, "the splitter changed a line: " + shown(line.text) + " for " + shown(want));
    }

    size_t first_answer = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      first_answer = sent.size();
    }
    const int64_t version_before = ledger.version();
    if (line.too_long) {
      server.handle_oversized(line.text, line.tail);
    } else {
      server.handle_line(line.text);
    }
    server.drain();  // every call this line started has answered
    const bool ledger_changed = ledger.version() != version_before;

    std::vector<Json> answers;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t k = first_answer; k < sent.size(); ++k) {
        Json message = Json::parse(sent[k], nullptr, false);
        require(!message.is_discarded(), "the server wrote a line that is not JSON: " + shown(sent[k]));
        if (message.is_object() && message.contains("method")) continue;  // a notification of its own
        fuzz::check_answer(message, shown(sent[k]) + " (to " + shown(want) + ")");
        answers.push_back(std::move(message));
      }
    }
    const std::string context = " (line: " + shown(want) + ")";
    if (line.too_long) {
      require(answers.size() <= 1, std::to_string(answers.size()) + " answers to one oversized line" + context);
      require(!ledger_changed, "an oversized line reached the ledger" + context);
      continue;
    }
    if (blank(want)) {
      require(answers.empty(), "a blank line was answered" + context);
      continue;
    }
    const Grammar::Reading reading = Grammar(want).read();
    if (reading.readable_request()) {
      require(answers.size() == 1, "a request with id " + reading.id->dump() + " got " +
                                       std::to_string(answers.size()) + " answers" + context);
      require(answers[0]["id"] == *reading.id,
              "a request with id " + reading.id->dump() + " answered under " + answers[0]["id"].dump() + context);
    } else if (!reading.json && !reading.too_deep && !reading.huge_number) {
      require(answers.size() == 1, "a line that is not JSON got " + std::to_string(answers.size()) + " answers" +
                                       context);
      require(answers[0]["id"].is_null() && answers[0].contains("error") &&
                  answers[0]["error"]["code"] == mcp::jsonrpc::kParseError,
              "a line that is not JSON was not answered with a parse error under id null: " + answers[0].dump() +
                  context);
    } else if (reading.plain_notification()) {
      require(answers.empty(), "a notification was answered: " + (answers.empty() ? "" : answers[0].dump()) + context);
    } else {
      require(answers.size() <= 1, std::to_string(answers.size()) + " answers to one line" + context);
    }
    if (ledger_changed) {
      require(reading.readable_request() && reading.method_name == "tools/call" && answers.size() == 1 &&
                  fuzz::took_arguments(answers[0]),
              "the ledger changed for a line that is not a tools/call whose arguments were taken" + context +
                  (answers.empty() ? "" : " answered " + shown(answers[0].dump())));
    }
  }
  return 0;
}
