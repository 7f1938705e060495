#include "mcp/jsonrpc.h"

#include <string>

#include <catch2/catch.hpp>

using namespace effectfence;
using namespace effectfence::mcp::jsonrpc;

namespace {

Invalid invalid_of(const std::string& line) {
  Message m = classify(line);
  REQUIRE(std::holds_alternative<Invalid>(m));
  return std::get<Invalid>(m);
}

}  // namespace

TEST_CASE("classify tells requests, notifications and responses apart", "[jsonrpc]") {
  Message request = classify(R"({"jsonrpc":"2.0","id":7,"method":"ping"})");
  REQUIRE(std::holds_alternative<Request>(request));
  CHECK(std::get<Request>(request).id == 7);
  CHECK(std::get<Request>(request).method == "ping");
  CHECK(std::get<Request>(request).params == Json::object());

  Message string_id = classify(R"({"jsonrpc":"2.0","id":"abc","method":"tools/list","params":{"cursor":"x"}})");
  REQUIRE(std::holds_alternative<Request>(string_id));
  CHECK(std::get<Request>(string_id).id == "abc");
  CHECK(std::get<Request>(string_id).params["cursor"] == "x");

  Message note = classify(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  REQUIRE(std::holds_alternative<Notification>(note));
  CHECK(std::get<Notification>(note).method == "notifications/initialized");

  Message response = classify(R"({"jsonrpc":"2.0","id":3,"result":{}})");
  REQUIRE(std::holds_alternative<Response>(response));
  CHECK(std::get<Response>(response).result.has_value());

  Message error_for_unknown = classify(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}})");
  REQUIRE(std::holds_alternative<Response>(error_for_unknown));
  CHECK(std::get<Response>(error_for_unknown).id.is_null());
}

TEST_CASE("malformed JSON is a parse error with a null id", "[jsonrpc]") {
  Invalid bad = invalid_of(R"({"jsonrpc":"2.0","id":1,"method":"ping")");
  CHECK(bad.code == kParseError);
  CHECK(bad.id.is_null());
}

TEST_CASE("a NUL byte makes the whole line a parse error, whatever follows it", "[jsonrpc]") {
  // A lexer that stops at the NUL would answer the ping and drop the rest.
  Invalid bad = invalid_of(std::string("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0 ]]] not JSON", 54));
  CHECK(bad.code == kParseError);
  CHECK(bad.id.is_null());
  CHECK_THAT(bad.message, Catch::Contains("NUL byte"));
}

TEST_CASE("invalid UTF-8 is a parse error that says so", "[jsonrpc]") {
  Invalid bad = invalid_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xff\"}");
  CHECK(bad.code == kParseError);
  CHECK(bad.id.is_null());
  CHECK_THAT(bad.message, Catch::Contains("UTF-8"));
}

TEST_CASE("batches get a clear invalid-request error", "[jsonrpc]") {
  Invalid bad = invalid_of(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  CHECK(bad.code == kInvalidRequest);
  CHECK(bad.id.is_null());
  CHECK_THAT(bad.message, Catch::Contains("batch"));
}

TEST_CASE("envelope errors", "[jsonrpc]") {
  CHECK(invalid_of(R"("hello")").code == kInvalidRequest);
  Invalid no_version = invalid_of(R"({"id":1,"method":"ping"})");
  CHECK(no_version.code == kInvalidRequest);
  CHECK(no_version.id == 1);
  CHECK(invalid_of(R"({"jsonrpc":"1.0","id":1,"method":"ping"})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":1,"method":5})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":true,"method":"ping"})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":null,"method":"ping"})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":1})").code == kInvalidRequest);
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":1})").answer);
  Invalid both = invalid_of(R"({"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"x"}})");
  CHECK_FALSE(both.answer);  // a malformed response is still a response: never answered
  CHECK_THAT(both.message, Catch::Contains("invalid response"));
  Invalid method_and_result = invalid_of(R"({"jsonrpc":"2.0","id":6,"method":"ping","result":{}})");
  CHECK(method_and_result.code == kInvalidRequest);
  CHECK(method_and_result.id == 6);
  CHECK_THAT(method_and_result.message, Catch::Contains("a request has no outcome, a response no method"));
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":6,"method":"ping","error":{"code":1,"message":"m"}})").code ==
        kInvalidRequest);
  Invalid array_params = invalid_of(R"({"jsonrpc":"2.0","id":"q","method":"ping","params":[1]})");
  CHECK(array_params.code == kInvalidParams);
  CHECK(array_params.id == "q");
}

TEST_CASE("a notification with params that are not an object is still a notification (never answered)",
          "[jsonrpc]") {
  for (const char* line : {R"({"jsonrpc":"2.0","method":"notifications/initialized","params":[]})",
                           R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"})"}) {
    INFO(line);
    Message m = classify(line);
    REQUIRE(std::holds_alternative<Notification>(m));
    CHECK(std::get<Notification>(m).params == Json::object());
  }
}

TEST_CASE("ambiguous JSON is refused and answered to the request that sent it", "[jsonrpc]") {
  Invalid duplicate = invalid_of(
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"a":1,"a":2}}})");
  CHECK(duplicate.code == kInvalidParams);
  CHECK(duplicate.id == 4);
  CHECK_THAT(duplicate.message, Catch::Contains("duplicate"));

  Invalid unsafe = invalid_of(
      R"({"jsonrpc":"2.0","id":"u","method":"tools/call","params":{"arguments":{"n":9007199254740993}}})");
  CHECK(unsafe.code == kInvalidParams);
  CHECK(unsafe.id == "u");

  // A lone surrogate before the id, as the TypeScript SDK writes a request
  // (id last) holding a string cut mid-emoji: still answered to its id.
  for (const char* text : {R"({"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"i":"a\ud800b"}},"id":2})",
                           R"({"method":"tools/call","params":{"arguments":{"i":"\udc00\ud83d"}},"id":"s"})",
                           R"({"method":"tools/call","params":{"arguments":{"i":"\\ud800\ud83d\ude00\ud800"}},)"
                           R"("id":3})"}) {
    Invalid lone = invalid_of(text);
    INFO(text);
    CHECK(lone.code == kInvalidParams);
    CHECK_FALSE(lone.id.is_null());
  }
  // A well-paired surrogate is no reason to refuse at all.
  CHECK(std::holds_alternative<Request>(
      classify(R"({"jsonrpc":"2.0","method":"ping","params":{"e":"\ud83d\ude00"},"id":9})")));

  Invalid two_ids = invalid_of(R"({"jsonrpc":"2.0","id":1,"id":2,"method":"ping"})");
  CHECK(two_ids.id.is_null());
  CHECK(two_ids.code == kParseError);
  CHECK_THAT(duplicate.message, Catch::StartsWith("ambiguous JSON refused: "));

  // Well-formed JSON whose id no JSON-RPC peer can keep apart: an invalid
  // request (-32600, id null), as an id of another type is, not a parse error.
  for (const char* text : {R"({"jsonrpc":"2.0","id":9007199254740993,"method":"ping"})",
                           R"({"jsonrpc":"2.0","method":"ping","id":-18446744073709551617})"}) {
    INFO(text);
    Invalid wide_id = invalid_of(text);
    CHECK(wide_id.code == kInvalidRequest);
    CHECK(wide_id.id.is_null());
    CHECK(wide_id.answer);
    CHECK_THAT(wide_id.message, Catch::Contains("\"id\" must be a string or an integer within +/-2^53"));
  }
}

TEST_CASE("an ambiguous notification is refused unanswered, and a lone surrogate in one is read as U+FFFD", "[jsonrpc]") {
  for (const char* text : {R"({"jsonrpc":"2.0","method":"notifications/x","params":{"a":1,"a":2}})",
                           R"({"jsonrpc":"2.0","method":"notifications/x","params":{"n":9007199254740993}})",
                           R"({"jsonrpc":"2.0","method":"notifications/x","method":"notifications/y"})"}) {
    INFO(text);
    Invalid refused = invalid_of(text);
    CHECK_FALSE(refused.answer);
    CHECK(refused.id.is_null());
  }
  // Two ids are no notification: refused, and answered (to no id).
  CHECK(invalid_of(R"({"jsonrpc":"2.0","id":1,"id":2,"method":"notifications/x"})").answer);

  Message cancel = classify(
      R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r1","reason":"cut \ud83d"}})");
  REQUIRE(std::holds_alternative<Notification>(cancel));
  const Notification& note = std::get<Notification>(cancel);
  CHECK(note.method == "notifications/cancelled");
  CHECK(note.params["requestId"] == "r1");
  CHECK(note.params["reason"] == "cut \xef\xbf\xbd");  // U+FFFD
  // Still refused when something besides the surrogate is wrong with it.
  CHECK_FALSE(invalid_of(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r","requestId":"\ud800"}})").answer);
}

TEST_CASE("JSON too deep or too large to hold is refused as such, not called ambiguous", "[jsonrpc]") {
  std::string deep = R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"a":)";
  deep += std::string(200, '[') + std::string(200, ']') + "}}}";
  Invalid too_deep = invalid_of(deep);
  CHECK(too_deep.id == 7);
  CHECK_THAT(too_deep.message, Catch::StartsWith("JSON refused: nesting") && Catch::Contains("(too_deep)"));
  Invalid infinite = invalid_of(R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"arguments":{"n":1e400}}})");
  CHECK(infinite.id == 8);
  CHECK_THAT(infinite.message, Catch::StartsWith("JSON refused: ") && Catch::Contains("(non_finite)"));
}

TEST_CASE("recover_answer_id takes an outcome, or an id alone, for an answer", "[jsonrpc]") {
  CHECK(recover_answer_id(R"({"jsonrpc":"2.0","id":3})") == 3);
  CHECK(recover_answer_id(R"({"jsonrpc":"2.0","id":3,"method":"x","result":{}})") == 3);
  CHECK(recover_answer_id(R"({"jsonrpc":"2.0","id":3,"result":{},"error":{}})") == 3);
  CHECK(recover_answer_id(R"({"jsonrpc":"2.0","id":3,"method":"x","params":[1]})").is_null());
  // A request whose method key is misspelt is no answer either.
  CHECK(recover_answer_id(R"({"jsonrpc":"2.0","id":3,"Method":"roots/list","params":{}})").is_null());
  CHECK(recover_response_id(R"({"jsonrpc":"2.0","id":3})").is_null());
}

TEST_CASE("recover_id finds the top-level id only", "[jsonrpc]") {
  CHECK(recover_id(R"({"params":{"id":9},"id":"top")") == "top");
  CHECK(recover_id(R"({"jsonrpc":"2.0","id":12,"method":"x","params":{"big":"aaaa)") == 12);
  CHECK(recover_id(R"({"params":{"id":9}})").is_null());
  CHECK(recover_id(R"({"id":{"x":1}})").is_null());
  CHECK(recover_id(R"({"id":9007199254740993})").is_null());
  CHECK(recover_id(R"([{"id":1}])").is_null());
}

TEST_CASE("oversized messages are invalid requests naming the limit", "[jsonrpc]") {
  Invalid big = oversized(R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"x":"aaaa)", "aaaa\"}}}", 1024);
  CHECK(big.code == kInvalidRequest);
  CHECK(big.id == 5);
  CHECK_THAT(big.message, Catch::Contains("too large") && Catch::Contains("1024"));
  // The TypeScript SDK writes the id last: it is read from the line's end.
  Invalid id_last = oversized(R"({"method":"tools/call","params":{"arguments":{"result":"aaaa)",
                              R"(aaaa"}},"jsonrpc":"2.0","id":7})", 1024);
  CHECK(id_last.id == 7);
  CHECK(oversized(R"({"method":"tools/call","params":{"x":"aa)", R"(aa"}, "id" : "s-1" } )", 1024).id == "s-1");
}

TEST_CASE("trailing_id reads only an id that closes the object the line ends", "[jsonrpc]") {
  CHECK(trailing_id(R"(aa","id":7})") == 7);
  CHECK(trailing_id(R"({"id":-3})") == -3);
  CHECK(trailing_id(R"(x,"id":"abc"}  )") == "abc");
  CHECK(trailing_id(R"(x,"id":"abc"})" "\r") == "abc");
  CHECK(trailing_id(R"(,"params":{"id":7}})").is_null());      // a nested id
  CHECK(trailing_id(R"(,"id":7}})").is_null());                // closes a nested object
  CHECK(trailing_id(R"(x\",\"id\":7})").is_null());            // inside a string
  CHECK(trailing_id(R"(,"xid":7})").is_null());
  CHECK(trailing_id(R"(,"id":"a\"b"})").is_null());             // escapes are not read
  CHECK(trailing_id(R"(,"id":9007199254740993})").is_null());  // beyond what a double keeps
  CHECK(trailing_id(R"(,"id":1.5})").is_null());
  CHECK(trailing_id(R"(,"id":null})").is_null());
  CHECK(trailing_id(R"("id":7})").is_null());                  // nothing shows it is a member
  CHECK(trailing_id("").is_null());

  // oversized_response_id: only for what says it is a response, id first or last.
  CHECK(oversized_response_id(R"({"id":4,"result":{"x":"aa)", R"(aa"}})") == Json(4));
  CHECK(oversized_response_id(R"({"result":{"x":"aa)", R"(aa"},"id":"r-1"})") == Json("r-1"));
  CHECK(oversized_response_id(R"({"result":{"x":"aa)", R"(aa"}})") == Json());
  CHECK_FALSE(oversized_response_id(R"({"method":"x","params":{"x":"aa)", R"(aa"},"id":5})"));
}

TEST_CASE("first_invalid_utf8", "[jsonrpc]") {
  CHECK_FALSE(first_invalid_utf8("plain ascii"));
  CHECK_FALSE(first_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  CHECK(first_invalid_utf8("ab\xc3") == size_t(2));          // truncated sequence
  CHECK(first_invalid_utf8("\xc0\xaf") == size_t(0));        // overlong
  CHECK(first_invalid_utf8("x\xed\xa0\x80") == size_t(1));   // encoded surrogate
  // Bad bytes after and between runs of ASCII read eight at a time.
  const std::string ascii(37, 'a');
  for (size_t at = 0; at <= ascii.size(); ++at) {
    const std::string text = ascii.substr(0, at) + "\xff" + ascii.substr(at);
    CHECK(first_invalid_utf8(text) == at);
    CHECK_FALSE(first_invalid_utf8(ascii.substr(0, at) + "\xc3\xa9" + ascii.substr(at)));
    CHECK(first_invalid_utf8(ascii.substr(0, at) + "\xc3") == at);
  }
}

TEST_CASE("builders and serialize", "[jsonrpc]") {
  CHECK(serialize(result_response("a", Json::object())) == R"({"id":"a","jsonrpc":"2.0","result":{}})");
  Json error = error_response(nullptr, kParseError, "bad");
  CHECK(error["id"].is_null());
  CHECK(error["error"]["code"] == kParseError);
  CHECK_FALSE(error["error"].contains("data"));
  CHECK(serialize(Json("x\xff")).find('\n') == std::string::npos);
}

// Regression: the id recovery stopped at 1e400 (the SAX parser gives up on
// a number a double cannot hold), so the request read as a notification and
// was never answered.
TEST_CASE("id_after_overflowing_number: a request whose id follows 1e400 is answered under its id", "[jsonrpc]") {
  Invalid after = invalid_of(R"({"jsonrpc":"2.0","method":"m","params":{"n":1e400},"id":7})");
  CHECK(after.answer);
  CHECK(after.id == 7);
  CHECK(after.code == kInvalidParams);
  CHECK_THAT(after.message, Catch::Contains("(non_finite)"));
  // 400 digits overflow too; a string holding them does not.
  const std::string digits(400, '9');
  CHECK(invalid_of(R"({"method":"m","params":{"n":-)" + digits + R"(,"s":"1e400\"9"},"id":"x"})").id == "x");
  CHECK(recover_id(R"({"method":"m","params":[1E+999,2e-999],"id":8})") == 8);
  // An id that overflows is still no id.
  CHECK(recover_id(R"({"method":"m","id":1e400})").is_null());
  // A notification with such a number is still a notification, never answered.
  CHECK_FALSE(invalid_of(R"({"jsonrpc":"2.0","method":"m","params":{"n":1e400}})").answer);
}

// Regression (found by fuzz_stdio): the parser stops at the first thing
// wrong, so a lone surrogate (or a duplicate key) before a syntax error made
// a line that is no JSON at all read as an ambiguous notification, dropped
// unanswered, instead of a parse error.
TEST_CASE("syntax_error_after_lone_surrogate: a line that is no JSON is a parse error whatever comes first",
          "[jsonrpc]") {
  for (const char* text : {R"({"jsonrpc":"2.0","method":"tools/call","params":{"s":"\ud800"},"ip"}}})",
                           R"({"jsonrpc":"2.0","method":"m","params":{"a":1,"a":2},)",
                           R"({"jsonrpc":"2.0","method":"m","params":{"n":1e400}] )",
                           R"({"jsonrpc":"2.0","id":3,"method":"m","params":{"s":"\udc00"} trailing)"}) {
    INFO(text);
    Invalid bad = invalid_of(text);
    CHECK(bad.answer);
    CHECK(bad.code == kParseError);
    CHECK(bad.id.is_null());
    CHECK_THAT(bad.message, Catch::StartsWith("parse error: not valid JSON"));
  }
  // Well-formed, only ambiguous: still refused as such, unanswered as a notification.
  CHECK_FALSE(invalid_of(R"({"jsonrpc":"2.0","method":"m","params":{"s":"\ud800","s":1}})").answer);
}
