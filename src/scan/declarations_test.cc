#include <catch2/catch.hpp>

#include <string>

#include "scan/declarations.h"

using namespace effectfence::scan;

namespace {

SourceFile file_of(const std::string& path, const std::string& text) {
  SourceFile file{path, *language_of_path(path), text, {}};
  file.masked = mask_source(file.text, file.language);
  return file;
}

std::vector<ToolDeclaration> declared(const std::string& path, const std::string& text) {
  return find_declarations(file_of(path, text), 0);
}

}  // namespace

TEST_CASE("object literals with a schema are tools, each keeps its own description", "[scan][declarations]") {
  const auto found = declared("s.ts",
                              "const tools = [\n"
                              "  { name: 'read_balance', description: 'Reads the balance.', inputSchema: {} },\n"
                              "  { name: \"send_payout\",\n    description: \"Sends \" +\n      \"a payout.\",\n"
                              "    inputSchema: { type: 'object', properties: { name: { type: 'string' } } } },\n"
                              "];\nconst other = { name: 'not_a_tool', description: 'no schema' };\n");
  REQUIRE(found.size() == 2);
  CHECK(found[0].name == "read_balance");
  CHECK(found[0].description == "Reads the balance.");
  CHECK(found[0].line == 2);
  CHECK(found[1].name == "send_payout");
  CHECK(found[1].description == "Sends a payout.");  // concatenated, and nothing of the neighbour's
  CHECK(found[1].line == 3);
}

TEST_CASE("server.tool and registerTool calls name the tool in their first argument", "[scan][declarations]") {
  const auto found = declared("s.js",
                              "server.tool('charge', 'Charges a card.', {}, async () => {});\n"
                              "server.registerTool(\"read_file\", {\n  title: 'Read',\n"
                              "  description: 'Reads a file.', inputSchema: {} }, handler);\n"
                              "server.tool(nameFromConfig, 'dynamic');\n");
  REQUIRE(found.size() == 2);
  CHECK(found[0].name == "charge");
  CHECK(found[0].description == "Charges a card.");
  CHECK(found[0].form == "tool(...)");
  CHECK(found[1].name == "read_file");
  CHECK(found[1].description == "Reads a file.");
  CHECK(found[1].line == 2);
}

TEST_CASE("Python: @tool decorators on defs, with docstrings or description=", "[scan][declarations]") {
  const auto found = declared("s.py",
                              "@mcp.tool()\n"
                              "def create_link(order: str) -> str:\n"
                              "    \"\"\"Builds a link.\"\"\"\n"
                              "    return 'x'\n\n"
                              "@server.tool(name=\"refund\", description=\"Refunds a charge.\")\n"
                              "async def do_refund(charge_id):\n"
                              "    pass\n"
                              "types.Tool(name='listed', description='Lists things.', inputSchema={})\n");
  REQUIRE(found.size() == 3);
  CHECK(found[0].name == "create_link");
  CHECK(found[0].description == "Builds a link.");
  CHECK(found[0].line == 2);
  CHECK(found[1].name == "refund");
  CHECK(found[1].description == "Refunds a charge.");
  CHECK(found[2].name == "listed");
}

TEST_CASE("Go: NewTool with WithDescription, and Tool{Name:} literals", "[scan][declarations]") {
  const auto found = declared("main.go",
                              "var t = mcp.NewTool(\"create_order\",\n"
                              "  mcp.WithDescription(\"Creates an order.\"),\n"
                              "  mcp.WithString(\"sku\", mcp.Description(\"the sku\")))\n"
                              "var u = &mcp.Tool{Name: \"get_order\", Description: `Gets an order.`}\n");
  REQUIRE(found.size() == 2);
  CHECK(found[0].name == "create_order");
  CHECK(found[0].description == "Creates an order.");
  CHECK(found[1].name == "get_order");
  CHECK(found[1].description == "Gets an order.");
}

TEST_CASE("Rust: #[tool] attributes on fns, and Tool::new", "[scan][declarations]") {
  const auto found = declared("lib.rs",
                              "#[tool(description = \"Transfers money.\")]\n"
                              "async fn transfer(&self) -> String { if x { y } else { z } }\n"
                              "let t = Tool::new(\"ping\", \"Checks the server.\", schema);\n");
  REQUIRE(found.size() == 2);
  CHECK(found[0].name == "transfer");
  CHECK(found[0].description == "Transfers money.");
  CHECK(found[0].line == 2);
  CHECK(found[1].name == "ping");
  CHECK(found[1].description == "Checks the server.");
}

TEST_CASE("a declaration in a comment or a string is no declaration", "[scan][declarations]") {
  CHECK(declared("s.ts", "// server.tool('ghost', 'Deletes all.', {})\nconst s = \"server.tool('x')\";\n").empty());
  CHECK(declared("s.py", "# @mcp.tool()\n# def ghost(): pass\n").empty());
}

TEST_CASE("bracket entries: keys with ':' or '=', positional values, nested brackets", "[scan][declarations]") {
  const SourceFile f = file_of("a.ts", "f(\"n\", {a: 1}, b = g(1, 2), 'k': [3, 4], x::y, c == d)");
  const auto entries = bracket_entries(f.masked, 1, f.masked.code.size() - 1);
  REQUIRE(entries.size() == 6);
  CHECK(entries[0].key.empty());
  CHECK(entries[1].key.empty());
  CHECK(entries[2].key == "b");
  CHECK(entries[3].key == "k");
  CHECK(entries[4].key.empty());
  CHECK(entries[5].key.empty());
}

TEST_CASE("deeply nested code is read once, not once per level", "[scan][declarations]") {
  const std::string deep = std::string(50000, '{') + std::string(50000, '}');
  const auto found = declared("deep.js", "const a = " + deep + ";\nserver.tool('after_the_deep_part', 'Sends it.', {});\n");
  REQUIRE(found.size() == 1);
  CHECK(found[0].name == "after_the_deep_part");
  CHECK(found[0].line == 2);
}

TEST_CASE("hints written in a declaration, in each language's spelling", "[scan][declarations]") {
  const auto js = declared("s.ts",
                           "server.registerTool('r', { description: 'x', annotations: { readOnlyHint: true } }, h);\n"
                           "server.registerTool('w', { description: 'x', annotations: { idempotentHint: false,\n"
                           "  destructiveHint: true } }, h);\n"
                           "server.registerTool('plain', { description: 'x' }, h);\n");
  REQUIRE(js.size() == 3);
  CHECK(js[0].annotations == effectfence::Json{{"readOnlyHint", true}});
  CHECK(js[1].annotations == effectfence::Json{{"idempotentHint", false}, {"destructiveHint", true}});
  CHECK(js[2].annotations.empty());

  const auto py = declared("s.py",
                           "@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))\ndef a():\n    pass\n"
                           "@mcp.tool(annotations={\"idempotentHint\": True})\ndef b():\n    pass\n"
                           "@mcp.tool(description=\"its readOnlyHint is, true, not written\")\ndef c():\n    pass\n");
  REQUIRE(py.size() == 3);
  CHECK(py[0].annotations == effectfence::Json{{"readOnlyHint", true}});
  CHECK(py[1].annotations == effectfence::Json{{"idempotentHint", true}});
  CHECK(py[2].annotations.empty());  // a sentence in a string is no hint

  const auto go = declared("m.go", "var t = mcp.NewTool(\"g\", mcp.WithReadOnlyHintAnnotation(true))\n");
  REQUIRE(go.size() == 1);
  CHECK(go[0].annotations == effectfence::Json{{"readOnlyHint", true}});

  const auto rs = declared("l.rs", "#[tool(description = \"d\", annotations(read_only_hint = false))]\nfn f() {}\n");
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].annotations == effectfence::Json{{"readOnlyHint", false}});
}

// Found by tools/fuzz (fuzz_scan): an unclosed tool object's extent ended
// one byte past the text.
TEST_CASE("declaration_end_past_text: an unclosed tool object ends at the end of the text", "[scan][declarations]") {
  const std::string text = "const t = { name: 'send_payout', description: 'Sends.', inputSchema: {}";
  const auto found = declared("s.ts", text);
  REQUIRE(found.size() == 1);
  CHECK(found[0].name == "send_payout");
  CHECK(found[0].end == text.size());
}

TEST_CASE("declaration_end_past_text: an unclosed server.tool call ends at the end of the text", "[scan][declarations]") {
  const std::string text = "server.tool('send_payout', 'Sends a payout.', {}, async () => pay()";
  const auto found = declared("s.js", text);
  REQUIRE(found.size() == 1);
  CHECK(found[0].end == text.size());
}
