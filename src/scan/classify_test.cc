#include <catch2/catch.hpp>

#include <fstream>

#include "scan/render.h"
#include "scan/report.h"
#include "support/temp_dir.h"

using namespace effectfence::scan;
using effectfence::Json;
using effectfence::testing::TempDir;

namespace {

void write(const TempDir& dir, const std::string& relative, const std::string& text) {
  const auto path = dir.path() / relative;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

SourceTree tree_of(const TempDir& dir) {
  auto tree = read_source_tree(dir.path().string());
  REQUIRE(tree.ok());
  return std::move(*tree);
}

const ToolFinding& tool_named(const ScanReport& report, const std::string& name) {
  for (const auto& tool : report.tools) {
    if (tool.name == name) return tool;
  }
  FAIL("no tool " << name);
  throw;
}

const char* kPayoutServer =
    "const tools = [\n"
    "  { name: 'read_balance', description: 'Reads the balance.', inputSchema: {} },\n"
    "  { name: 'send_payout', description: 'Sends a payout.', inputSchema: {} },\n"
    "];\n"
    "export async function pay(a) { return fetch(u, { method: 'POST', body: a }); }\n";

}  // namespace

TEST_CASE("the source tree leaves out dependencies, build output, tests and examples", "[scan][report]") {
  TempDir dir;
  write(dir, "src/server.ts", kPayoutServer);
  write(dir, "node_modules/x/index.js", "axios.post(u)\n");
  write(dir, "dist/server.js", "axios.post(u)\n");
  write(dir, "tests/a.ts", "axios.post(u)\n");
  write(dir, "examples/a.py", "requests.post(u)\n");
  write(dir, "src/server.test.ts", "axios.post(u)\n");
  write(dir, "src/types.d.ts", "declare const x: number;\n");
  write(dir, "README.md", "axios.post(u)\n");
  const SourceTree tree = tree_of(dir);
  REQUIRE(tree.files.size() == 1);
  CHECK(tree.files[0].path == "src/server.ts");
  CHECK(tree.skipped_dirs == std::vector<std::string>{"dist", "examples", "node_modules", "tests"});
}

TEST_CASE("a missing path is an error with its name", "[scan][report]") {
  const auto tree = read_source_tree("/nonexistent/effectfence-scan");
  CHECK_FALSE(tree.ok());
  CHECK(tree.status().message() == "no such file or directory: /nonexistent/effectfence-scan");
}

TEST_CASE("source: a read tool next to a write tool is not flagged, the write tool is, with its wrap line",
          "[scan][report]") {
  TempDir dir;
  write(dir, "src/server.ts", kPayoutServer);
  const SourceTree tree = tree_of(dir);
  const ScanReport report = build_report(&tree, nullptr, {});
  REQUIRE(report.tools.size() == 2);
  CHECK(report.tools[0].name == "send_payout");  // candidates first
  CHECK(report.tools[0].standing == Standing::candidate);
  CHECK(report.tools[0].wrap_command == "effectfence wrap --only send_payout -- <command that starts this server>");
  const ToolFinding& read = tool_named(report, "read_balance");
  CHECK(read.standing == Standing::reads);
  CHECK(read.effect_words.empty());
  CHECK(read.wrap_command.empty());
  REQUIRE(report.writes.size() == 1);
  CHECK(report.writes[0].file == "src/server.ts");
  CHECK(report.writes[0].line == 5);
  CHECK_FALSE(report.cannot_see.empty());
}

TEST_CASE("source: an effect-sounding tool in a tree without any write is not a candidate", "[scan][report]") {
  TempDir dir;
  write(dir, "app.py", "@mcp.tool()\ndef create_payment_link(order):\n    \"\"\"Creates a payment link.\"\"\"\n    return URL + order\n");
  const SourceTree tree = tree_of(dir);
  const ScanReport report = build_report(&tree, nullptr, {});
  REQUIRE(report.tools.size() == 1);
  CHECK(report.tools[0].standing == Standing::no_write_in_tree);
}

TEST_CASE("live: annotations decide, undeclared tools are candidates unless they say they read", "[scan][report]") {
  const std::vector<Json> live = {
      Json{{"name", "read_file"}, {"description", "Read a file."}, {"annotations", {{"readOnlyHint", true}}}},
      Json{{"name", "write_file"}, {"annotations", {{"readOnlyHint", false}, {"idempotentHint", true}}}},
      Json{{"name", "edit_file"}, {"annotations", {{"readOnlyHint", false}, {"idempotentHint", false}}}},
      Json{{"name", "add_task"}, {"description", "Adds a task."}},
      Json{{"name", "list_tasks"}, {"description", "Lists the tasks."}},
  };
  const ScanReport report = build_report(nullptr, &live, {"node", "server.js", "a dir"});
  CHECK(tool_named(report, "read_file").standing == Standing::reads);
  CHECK(tool_named(report, "write_file").standing == Standing::declared_idempotent);
  CHECK(tool_named(report, "edit_file").standing == Standing::candidate);
  CHECK(tool_named(report, "edit_file").wrap_command == "effectfence wrap --only edit_file -- node server.js 'a dir'");
  CHECK(tool_named(report, "add_task").standing == Standing::candidate);
  CHECK(tool_named(report, "list_tasks").standing == Standing::reads);
  CHECK_FALSE(tool_named(report, "read_file").live->wrap_fences_by_default);
  CHECK(tool_named(report, "list_tasks").live->wrap_fences_by_default);
  const std::string text = render_text(report);
  CHECK(text.find("by default fences: ") != std::string::npos);
  CHECK(text.find("passes through (declared read-only): read_file\n") != std::string::npos);
}

TEST_CASE("both: joined by tool name, tools on one side only are said so", "[scan][report]") {
  TempDir dir;
  write(dir, "src/server.ts", kPayoutServer);
  const SourceTree tree = tree_of(dir);
  const std::vector<Json> live = {Json{{"name", "send_payout"}, {"annotations", {{"destructiveHint", true}}}},
                                  Json{{"name", "served_only"}, {"description", "Deletes a thing."}}};
  const ScanReport report = build_report(&tree, &live, {"srv"});
  REQUIRE(report.tools.size() == 3);
  const ToolFinding& payout = tool_named(report, "send_payout");
  CHECK(payout.source);
  CHECK(payout.live);
  CHECK(payout.standing == Standing::candidate);
  CHECK_FALSE(tool_named(report, "served_only").source);
  CHECK_FALSE(tool_named(report, "read_balance").live);
  const Json json = render_json(report);
  CHECK(json["mode"] == "both");
  CHECK(json["tools"][0]["source"]["line"] == 3);
  CHECK(json["tools"][0]["live"]["declared"] == "non_idempotent_or_destructive");
}

TEST_CASE("the text report: evidence, then checks, then the wrap line, and always what it cannot see",
          "[scan][report]") {
  TempDir dir;
  write(dir, "src/server.ts", kPayoutServer);
  const SourceTree tree = tree_of(dir);
  const std::string text = render_text(build_report(&tree, nullptr, {}));
  const size_t evidence = text.find("evidence:");
  const size_t checks = text.find("check by hand:");
  const size_t fence = text.find("effectfence wrap --only send_payout");
  REQUIRE(evidence != std::string::npos);
  CHECK(checks > evidence);
  CHECK(fence > checks);
  CHECK(text.find("What this scan cannot see:") != std::string::npos);
  CHECK(text.find("not verdicts") != std::string::npos);
}

TEST_CASE("shell words are quoted only when they need it", "[scan][report]") {
  CHECK(shell_word("node") == "node");
  CHECK(shell_word("/a/b-c.js") == "/a/b-c.js");
  CHECK(shell_word("a b") == "'a b'");
  CHECK(shell_word("it's") == "'it'\\''s'");
  CHECK(shell_word("") == "''");
}

TEST_CASE("source: hints written in a declaration decide when no server was asked", "[scan][report]") {
  TempDir dir;
  write(dir, "s.ts",
        "server.registerTool('charge_card', { description: 'Charges a card.', annotations: { readOnlyHint: true } }, h);\n"
        "server.registerTool('ping', { description: 'Nothing.', annotations: { destructiveHint: true } }, h);\n"
        "axios.post(u);\n");
  const SourceTree tree = tree_of(dir);
  const ScanReport report = build_report(&tree, nullptr, {});
  CHECK(tool_named(report, "charge_card").standing == Standing::reads);
  CHECK(tool_named(report, "ping").standing == Standing::candidate);
  const auto& evidence = tool_named(report, "ping").evidence;
  CHECK(std::any_of(evidence.begin(), evidence.end(), [](const std::string& line) {
    return line.find("writes the hints {\"destructiveHint\":true}") != std::string::npos;
  }));
}

TEST_CASE("template_nesting_too_deep: the report says which file and line were not read", "[scan][report]") {
  TempDir dir;
  std::string text = "axios.post(u)\n";
  for (int i = 0; i < 50000; ++i) text += "`${";
  write(dir, "deep.ts", text);
  const SourceTree tree = tree_of(dir);
  const ScanReport report = build_report(&tree, nullptr, {});
  const std::string expected = "deep.ts from line 2: templates nested deeper than 32 levels "
                               "(template_nesting_too_deep), the rest of the file was not read";
  CHECK(std::count(report.cannot_see.begin(), report.cannot_see.end(), expected) == 1);
}
