#include "mcp/json_text.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mcp/fence_tools.h"
#include "mcp/jsonrpc.h"
#include "mcp/server.h"

using namespace effectfence;
using namespace effectfence::mcp;

namespace {

// Text a ledger or a client may hand back: every escape, every control
// character, text beyond ASCII, and bytes that are not UTF-8 at all.
std::vector<std::string> tricky_strings() {
  std::vector<std::string> strings = {
      "", "plain", "quote \" and backslash \\", "slash / stays", "\u00e9t\u00e9", "\U0001F600 emoji", "\x7f del",
      "\xE2\x82", "\xC0\xAF overlong", "\xED\xA0\x80 encoded surrogate", "\xF4\x90\x80\x80 beyond U+10FFFF",
      "\xFF", std::string("nul \0 inside", 13),
  };
  std::string controls;
  for (int c = 1; c < 0x20; ++c) controls += static_cast<char>(c);
  strings.push_back(controls);
  return strings;
}

}  // namespace

TEST_CASE("JsonText writes strings and integers as serialize does", "[json_text]") {
  for (const std::string& s : tricky_strings()) {
    INFO(jsonrpc::serialize(Json(s)));
    CHECK(JsonText().string(s).take() == jsonrpc::serialize(Json(s)));
  }
  for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{42}, int64_t{9007199254740992}, INT64_MIN, INT64_MAX}) {
    CHECK(JsonText().integer(n).take() == jsonrpc::serialize(Json(n)));
  }
  JsonText object;
  object.begin_object().member("a", "x").member("b", 2).key("c").null().key("d").json(Json::array({1, "y"}));
  object.key("e").begin_object().end_object().end_object();
  CHECK(object.take() == jsonrpc::serialize(Json{{"a", "x"}, {"b", 2}, {"c", nullptr}, {"d", {1, "y"}}, {"e", Json::object()}}));
}

TEST_CASE("serialized text escaped into a string is what serialize makes of it", "[json_text]") {
  for (const std::string& s : tricky_strings()) {
    const std::string serialized = jsonrpc::serialize(Json{{"k\"" + s, s}, {"n", {1, 2.5, nullptr}}});
    std::string escaped;
    append_serialized_as_string(escaped, serialized);
    CHECK(escaped == jsonrpc::serialize(Json(serialized)));
  }
}

TEST_CASE("tickets and certificates written as text are their to_json, serialized", "[json_text]") {
  for (const std::string& s : tricky_strings()) {
    INFO(jsonrpc::serialize(Json(s)));
    const Ticket ticket{"intent " + s, s, 7, 2, "token" + s, 1700000000123};
    JsonText ticket_text;
    write_ticket(ticket_text, ticket);
    CHECK(ticket_text.take() == jsonrpc::serialize(ticket.to_json()));

    for (const bool with_parent : {false, true}) {
      Certificate cert;
      cert.intent = "intent " + s;
      cert.parent = with_parent ? "parent" + s : "";
      cert.domain = s;
      cert.seq = 12;
      cert.generation = 3;
      cert.tool = "tool" + s;
      cert.args = Json{{"order", s}, {"amount_cents", 1299}, {"nested", {{"list", {1, -2.5, true, nullptr}}}}};
      cert.result = with_parent ? Json(s) : Json{{"charged", true}};
      cert.vector_clock.tick("agent-b");
      cert.vector_clock.tick("agent " + s);
      cert.read_set = {ReadSetEntry{"d" + s, 4}, ReadSetEntry{"e", 0}};
      cert.agent = "agent " + s;
      cert.hash = "abc" + s;
      JsonText cert_text;
      write_certificate(cert_text, cert);
      CHECK(cert_text.take() == jsonrpc::serialize(cert.to_json()));
    }
  }
}

TEST_CASE("a tool result given as text makes the same response line as the same result as a tree", "[json_text]") {
  const Json structured = {{"status", "fresh"}, {"message", "run \"it\"\n"}, {"prepared", {{"seq", 1}, {"t", "\u00e9"}}}};
  for (const Json& id : {Json(7), Json("id \"q\""), Json(-3)}) {
    for (const bool is_error : {false, true}) {
      const std::string from_tree = tool_result_line(id, ToolResult{structured, is_error});
      const std::string from_text = tool_result_line(id, ToolResult::of_text(jsonrpc::serialize(structured), is_error));
      CHECK(from_text == from_tree);
      CHECK(ToolResult::of_text(jsonrpc::serialize(structured), is_error).structured_json() == structured);
      // And the line itself is what serializing the whole response gives.
      const Json content = Json::array({Json{{"type", "text"}, {"text", jsonrpc::serialize(structured)}}});
      CHECK(from_tree == jsonrpc::serialize(jsonrpc::result_response(
                             id, Json{{"content", content}, {"isError", is_error}, {"structuredContent", structured}})));
    }
  }
}
