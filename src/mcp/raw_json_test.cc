#include "mcp/raw_json.h"

#include <catch2/catch.hpp>

#include "mcp/jsonrpc.h"

namespace effectfence::mcp {
namespace {

TEST_CASE("a raw node is written verbatim, key order and number spelling kept", "[raw_json]") {
  const std::string text = R"({"z":1.50,"a":{"y":[1e2,"\u00e9"],"b":null}})";
  const Json message = jsonrpc::result_response(7, raw_json(text));
  CHECK(jsonrpc::serialize(message) == R"({"id":7,"jsonrpc":"2.0","result":)" + text + "}");
  // Negative control: the same text parsed and written again is respelt and sorted.
  CHECK(jsonrpc::serialize(jsonrpc::result_response(7, Json::parse(text))) !=
        jsonrpc::serialize(message));
  // A tree without raw nodes is written as nlohmann writes it.
  const Json plain = {{"b", 1}, {"a", {1, 2.5, "x"}}};
  CHECK(jsonrpc::serialize(plain) == plain.dump());
  CHECK(is_raw_json(raw_json("{}")));
  CHECK_FALSE(is_raw_json(Json::binary({1, 2})));
  CHECK(raw_json_text(raw_json("  [1, 2] ")) == "[1, 2]");
}

TEST_CASE("member_text finds top-level members only, escaped keys too", "[raw_json]") {
  const std::string text = R"( { "a" : {"b": 1, "c": "}"} , "b" : [ 2, {"b":3} ], "k\u0065y": "v\"" } )";
  CHECK(member_text(text, "a") == std::optional<std::string_view>(R"({"b": 1, "c": "}"})"));
  CHECK(member_text(text, "b") == std::optional<std::string_view>(R"([ 2, {"b":3} ])"));
  CHECK(member_text(text, "key") == std::optional<std::string_view>(R"("v\"")"));
  CHECK_FALSE(member_text(text, "c"));
  CHECK_FALSE(member_text("[1]", "a"));
  CHECK(sent_member(R"({"method":"x"})", "params").is_null());
  CHECK(raw_json_text(sent_member(R"({"params":{"b":1,"a":2}})", "params")) == R"({"b":1,"a":2})");
}

TEST_CASE("with_member_text and without_member_text change one member and no other byte", "[raw_json]") {
  const std::string text = R"({"z":1, "_meta":{"q":true}, "a":2})";
  CHECK(with_member_text(text, "_meta", "{}") == R"({"z":1, "_meta":{}, "a":2})");
  CHECK(with_member_text(text, "new", R"({"x":1})") == R"({"z":1, "_meta":{"q":true}, "a":2,"new":{"x":1}})");
  CHECK(with_member_text("{}", "k", "1") == R"({"k":1})");
  CHECK(with_member_text("{ }", "k", "1") == R"({ "k":1})");
  CHECK(without_member_text(text, "_meta") == R"({"z":1, "a":2})");
  CHECK(without_member_text(text, "a") == R"({"z":1, "_meta":{"q":true}})");
  CHECK(without_member_text(text, "z") == R"({"_meta":{"q":true}, "a":2})");
  CHECK(without_member_text(R"({"only":1})", "only") == "{}");
  CHECK(without_member_text(text, "missing") == text);
  for (const std::string& edited : {with_member_text(text, "new", "[1]"), without_member_text(text, "_meta")}) {
    CHECK_NOTHROW(Json::parse(edited));
  }
}

TEST_CASE("element_texts splits an array as written", "[raw_json]") {
  const auto elements = element_texts(R"([ {"b":1,"a":[2,3]} , "x,y" ,1.0,[]])");
  REQUIRE(elements.size() == 4);
  CHECK(elements[0] == R"({"b":1,"a":[2,3]})");
  CHECK(elements[1] == R"("x,y")");
  CHECK(elements[2] == "1.0");
  CHECK(elements[3] == "[]");
  CHECK(element_texts("[]").empty());
  CHECK(element_texts(R"({"a":1})").empty());
}

}  // namespace
}  // namespace effectfence::mcp
