#include "mcp/plain_json.h"

#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace effectfence;
using effectfence::mcp::parse_plain;

namespace {

// Equal values of equal types all the way down: Json's == takes 1 and 1u
// (and 1.0) for the same, parse_strict does not build them alike.
bool same_tree(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y) {
      if (x.key() != y.key() || !same_tree(x.value(), y.value())) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_tree(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

// parse_plain either declines text or reads exactly what parse_strict reads.
void check_agrees(const std::string& text) {
  const std::optional<Json> plain = parse_plain(text);
  if (!plain) return;
  JsonError error{JsonErrorCode::syntax, ""};
  const std::optional<Json> strict = parse_strict(text, &error);
  INFO("text: " << text << " -> " << plain->dump(-1, ' ', false, Json::error_handler_t::replace));
  REQUIRE(strict);
  CHECK(same_tree(*plain, *strict));
}

const char* const kPlain[] = {
    R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"bench-1","domain":"bench-account-0","tool":"charge_card","args":{"order":1,"amount_cents":1299},"agent":"bench-agent-0"}}})",
    R"( { "a" : [ 1 , -2 , 0 , -0 , true , false , null , "" , { } , [ ] ] } )",
    "{\"tab\":\t\"\\t\\n\\r\\b\\f\\/\\\\\\\"\"}\r\n",
    R"({"u":"\u00e9\u0041\u0000\ud83d\ude00\uFFFF","raw":"é😀"})",
    R"({"big":9007199254740992,"small":-9007199254740992,"id":"x"})",
    R"([[[[[[[[[[["deep"]]]]]]]]]]])",
    R"("just a string")",
    "42",
    "-7",
};

const char* const kNotPlain[] = {
    "", "   ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":1}{}", "01", "-", "+1", "1.5", "1e3",
    "-0.0", "9007199254740993", "-9007199254740993", "18446744073709551616", "{\"a\":1,\"a\":2}",
    R"({"s":"\ud800"})", R"({"s":"\udc00"})", R"({"s":"\ud800\u0041"})", R"({"s":"\x"})", R"({"s":"\u12"})",
    "{\"s\":\"tab\tinside\"}", "\xEF\xBB\xBF{}", "{\"s\":\"\xC3\"}", "{\"s\":\"\xED\xA0\x80\"}", "nul", "tru",
    "[1]\x01",
};

}  // namespace

TEST_CASE("parse_plain reads plain JSON exactly as parse_strict does", "[plain_json]") {
  for (const char* text : kPlain) {
    INFO(text);
    CHECK(parse_plain(text).has_value());
    check_agrees(text);
  }
  CHECK(parse_plain(std::string(64, '[') + std::string(64, ']')).has_value());
  CHECK_FALSE(parse_plain(std::string(65, '[') + std::string(65, ']')).has_value());
  CHECK_FALSE(parse_plain(std::string("{\"a\":\"\0\"}", 9)).has_value());
}

TEST_CASE("parse_plain leaves everything else to parse_strict", "[plain_json]") {
  for (const char* text : kNotPlain) {
    INFO(text);
    CHECK_FALSE(parse_plain(text).has_value());
  }
}

TEST_CASE("parse_plain agrees with parse_strict on mangled messages", "[plain_json]") {
  // Seeds cut, spliced and sprinkled with the characters that matter to a
  // JSON reader: whatever parse_plain accepts, parse_strict reads alike.
  const std::string alphabet = "{}[]\":,\\/ \t\r\n-+.eE0123456789abfnrtu\x7f\x01\xC3\xA9\xED\xF0\x9F";
  std::vector<std::string> seeds(std::begin(kPlain), std::end(kPlain));
  std::mt19937 random(20251202);
  for (int round = 0; round < 20000; ++round) {
    std::string text = seeds[random() % seeds.size()];
    const int edits = 1 + static_cast<int>(random() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = random() % text.size();
      switch (random() % 4) {
        case 0: text[at] = alphabet[random() % alphabet.size()]; break;
        case 1: text.insert(at, 1, alphabet[random() % alphabet.size()]); break;
        case 2: text.erase(at, 1 + random() % 3); break;
        default: text.insert(at, text.substr(random() % text.size(), 1 + random() % 8)); break;
      }
    }
    check_agrees(text);
  }
}
