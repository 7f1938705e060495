#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "effectfence/json.h"

using effectfence::canonicalize;
using effectfence::format_es_number;
using effectfence::Json;
using effectfence::JsonError;
using effectfence::JsonErrorCode;
using effectfence::parse_strict;
using effectfence::validate_canonicalizable;
using effectfence::WideIntegers;

namespace {

double from_bits(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Canonical form of text that must parse.
std::string jcs(const std::string& text) {
  JsonError error{JsonErrorCode::syntax, ""};
  const auto parsed = parse_strict(text, &error);
  INFO(error.message);
  REQUIRE(parsed.has_value());
  return canonicalize(*parsed);
}

// The refusal of text that must not parse.
JsonError refusal(const std::string& text) {
  JsonError error{JsonErrorCode::syntax, "<untouched>"};
  const auto parsed = parse_strict(text, &error);
  INFO(text);
  REQUIRE_FALSE(parsed.has_value());
  REQUIRE(error.message != "<untouched>");
  return error;
}

JsonError value_refusal(const Json& value) {
  JsonError error{JsonErrorCode::syntax, "<untouched>"};
  REQUIRE_FALSE(validate_canonicalizable(value, &error));
  REQUIRE(error.message != "<untouched>");
  return error;
}

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("RFC 8785 section 3.2.2: the main example", "[canonical_json]") {
  const std::string input = R"({
    "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
    "literals": [null, true, false]
  })";
  const std::string expected =
      R"({"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],)"
      "\"string\":\"\u20ac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
  CHECK(jcs(input) == expected);
}

TEST_CASE("RFC 8785 section 3.2.3: keys sort by UTF-16 code units", "[canonical_json]") {
  const std::string input = R"({
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\ud83d\ude00": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis"
  })";
  const std::string expected =
      "{\"\\r\":\"Carriage Return\","
      "\"1\":\"One\","
      "\"\u0080\":\"Control\","
      "\"\u00f6\":\"Latin Small Letter O With Diaeresis\","
      "\"\u20ac\":\"Euro Sign\","
      "\"\U0001F600\":\"Emoji: Grinning Face\","
      "\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}";
  CHECK(jcs(input) == expected);
}

TEST_CASE("supplementary-plane keys sort before U+E000..U+FFFF, unlike UTF-8 byte order", "[canonical_json]") {
  Json value = Json::object();
  value["\uFFFD"] = 1;       // EF BF BD: after F0.. in UTF-8, but 0xFFFD > 0xD83D in UTF-16
  value["\U0001F600"] = 2;  // F0 9F 98 80
  CHECK(canonicalize(value) == "{\"\U0001F600\":2,\"\uFFFD\":1}");
}

namespace {

std::string utf8_of(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

std::u16string utf16_of(const std::u32string& text) {
  std::u16string units;
  for (const char32_t c : text) {
    if (c < 0x10000) {
      units += static_cast<char16_t>(c);
    } else {
      units += static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10));
      units += static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF));
    }
  }
  return units;
}

}  // namespace

TEST_CASE("keys of every UTF-8 length sort by UTF-16 code units, with and without a key at U+E000 and above",
          "[canonical_json]") {
  // Characters at the edges of each UTF-8 length and around the surrogates.
  const std::vector<char32_t> edges = {U'A', 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xEFFF, 0xF000, 0xFFFF,
                                       0x10000, 0x1F600, 0x10FFFF};
  std::mt19937 random(8785);
  for (int round = 0; round < 500; ++round) {
    // Below U+E000 only in half the rounds: UTF-8 byte order is then the
    // UTF-16 order already; above it, the two can differ.
    const size_t choices = round % 2 == 0 ? 6 : edges.size();
    std::vector<std::pair<std::u16string, std::string>> keys;  // (UTF-16, UTF-8)
    Json value = Json::object();
    for (int k = 0; k < 5; ++k) {
      std::u32string text;
      for (int i = 0; i < 1 + static_cast<int>(random() % 3); ++i) text += edges[random() % choices];
      std::string utf8;
      for (const char32_t c : text) utf8 += utf8_of(c);
      if (value.contains(utf8)) continue;
      value[utf8] = k;
      keys.emplace_back(utf16_of(text), utf8);
    }
    std::sort(keys.begin(), keys.end());
    std::string expected = "{";
    for (const auto& [units, utf8] : keys) {
      if (expected.size() > 1) expected += ',';
      expected += "\"" + utf8 + "\":" + std::to_string(value[utf8].get<int>());
    }
    expected += "}";
    REQUIRE(canonicalize(value) == expected);
  }
}

TEST_CASE("RFC 8785 appendix B: number serialization from IEEE-754 bit patterns", "[canonical_json]") {
  struct Sample {
    uint64_t bits;
    const char* expected;
  };
  const Sample samples[] = {
      {0x0000000000000000, "0"},
      {0x8000000000000000, "0"},
      {0x0000000000000001, "5e-324"},
      {0x8000000000000001, "-5e-324"},
      {0x7fefffffffffffff, "1.7976931348623157e+308"},
      {0xffefffffffffffff, "-1.7976931348623157e+308"},
      {0x4340000000000000, "9007199254740992"},
      {0xc340000000000000, "-9007199254740992"},
      {0x4430000000000000, "295147905179352830000"},
      {0x44b52d02c7e14af5, "9.999999999999997e+22"},
      {0x44b52d02c7e14af6, "1e+23"},
      {0x44b52d02c7e14af7, "1.0000000000000001e+23"},
      {0x444b1ae4d6e2ef4e, "999999999999999700000"},
      {0x444b1ae4d6e2ef4f, "999999999999999900000"},
      {0x444b1ae4d6e2ef50, "1e+21"},
      {0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
      {0x3eb0c6f7a0b5ed8d, "0.000001"},
      {0x41b3de4355555553, "333333333.3333332"},
      {0x41b3de4355555554, "333333333.33333325"},
      {0x41b3de4355555555, "333333333.3333333"},
      {0x41b3de4355555556, "333333333.3333334"},
      {0x41b3de4355555557, "333333333.33333343"},
      {0xbecbf647612f3696, "-0.0000033333333333333333"},
      {0x43143ff3c1cb0959, "1424953923781206.2"},
  };
  for (const Sample& sample : samples) {
    INFO("bits 0x" << std::hex << sample.bits);
    CHECK(format_es_number(from_bits(sample.bits)) == sample.expected);
    CHECK(canonicalize(Json(from_bits(sample.bits))) == sample.expected);
  }
}

TEST_CASE("ECMAScript layout at the decimal/exponential boundaries", "[canonical_json]") {
  CHECK(format_es_number(-0.0) == "0");
  CHECK(format_es_number(100) == "100");
  CHECK(format_es_number(-1.5) == "-1.5");
  CHECK(format_es_number(1e20) == "100000000000000000000");
  CHECK(format_es_number(1e21) == "1e+21");
  CHECK(format_es_number(1e-6) == "0.000001");
  CHECK(format_es_number(1e-7) == "1e-7");
  CHECK(format_es_number(123e-7) == "0.0000123");
  CHECK(format_es_number(1.5e-7) == "1.5e-7");
  CHECK(format_es_number(0.1 + 0.2) == "0.30000000000000004");
}

TEST_CASE("formatted numbers read back as the same double", "[canonical_json]") {
  std::mt19937_64 random(20240229);
  int checked = 0;
  while (checked < 20000) {
    const double value = from_bits(random());
    if (!std::isfinite(value)) continue;
    const std::string text = format_es_number(value);
    INFO(text);
    REQUIRE(std::strtod(text.c_str(), nullptr) == value);
    ++checked;
  }
}

TEST_CASE("integers print as exact decimals", "[canonical_json]") {
  CHECK(canonicalize(Json(int64_t{-9007199254740992})) == "-9007199254740992");
  CHECK(canonicalize(Json(uint64_t{9007199254740992})) == "9007199254740992");
  CHECK(canonicalize(Json(int64_t{0})) == "0");
  CHECK(jcs("-0") == "0");
}

TEST_CASE("strings escape only quote, backslash and control characters", "[canonical_json]") {
  const std::string controls = std::string("\b\f\n\r\t", 5) + std::string(1, '\0') + "\x01\x1f";
  CHECK(canonicalize(Json(controls)) == R"("\b\f\n\r\t\u0000\u0001\u001f")");
  CHECK(canonicalize(Json("\"\\/\x7f")) == "\"\\\"\\\\/\x7f\"");
  CHECK(canonicalize(Json("\u00e9\u4e2d\U0001F600")) == "\"\u00e9\u4e2d\U0001F600\"");
}

TEST_CASE("equal payloads canonicalize alike whatever their spelling", "[canonical_json]") {
  const std::string a = R"({"b":1.0,"a":[4.50,"x",{"z":null,"y":true}]})";
  const std::string b = "  {\n \"a\" : [ 4.5 , \"x\" , { \"y\" : true , \"z\" : null } ] ,\t\"b\" : 1 }\n";
  const std::string c = R"({"a":[45e-1,"\u0078",{"y":true,"z":null}],"b":10E-1})";
  CHECK(jcs(a) == jcs(b));
  CHECK(jcs(a) == jcs(c));
  CHECK(jcs(a) == R"({"a":[4.5,"x",{"y":true,"z":null}],"b":1})");
}

TEST_CASE("different payloads canonicalize differently", "[canonical_json]") {
  CHECK(jcs(R"({"a":1})") != jcs(R"({"a":"1"})"));
  CHECK(jcs(R"({"a":1})") != jcs(R"({"a":2})"));
  CHECK(jcs(R"({"a":null})") != jcs(R"({})"));
  CHECK(jcs("[1,2]") != jcs("[2,1]"));
  CHECK(jcs(R"({"a":[1]})") != jcs(R"({"a":1})"));
  CHECK(jcs(R"("a\u0000")") != jcs(R"("a")"));
}

TEST_CASE("parse_strict builds the same value as a plain parse", "[canonical_json]") {
  const std::string text =
      R"({"k":[1,-2,3.5,"s",true,false,null,{"n":{"m":[[],{}]}}],"e":{},"u":"\u00e9","a/b~c":[[1],[2,[3]]]})";
  JsonError error{JsonErrorCode::syntax, ""};
  const auto parsed = parse_strict(text, &error);
  INFO(error.message);
  REQUIRE(parsed.has_value());
  CHECK(*parsed == Json::parse(text));
}

TEST_CASE("scalars and whitespace are accepted at the top level", "[canonical_json]") {
  CHECK(jcs(" 7 ") == "7");
  CHECK(jcs("\"x\"") == "\"x\"");
  CHECK(jcs("null") == "null");
}

TEST_CASE("duplicate keys are refused, naming the key and the object", "[canonical_json]") {
  SECTION("top level") {
    const JsonError e = refusal(R"({"a":1,"b":2,"a":1})");
    CHECK(e.code == JsonErrorCode::duplicate_key);
    CHECK(e.message.find("\"a\"") != std::string::npos);
    CHECK(e.message.find("top level") != std::string::npos);
  }
  SECTION("nested in an object") {
    const JsonError e = refusal(R"({"outer":{"x":1,"x":2}})");
    CHECK(e.code == JsonErrorCode::duplicate_key);
    CHECK(e.message.find("\"x\"") != std::string::npos);
    CHECK(e.message.find("at /outer") != std::string::npos);
  }
  SECTION("nested in an array") {
    const JsonError e = refusal(R"({"list":[{"a":1},{"b":1,"b":2}]})");
    CHECK(e.code == JsonErrorCode::duplicate_key);
    CHECK(e.message.find("at /list/1") != std::string::npos);
  }
  SECTION("pointer tokens are escaped") {
    const JsonError e = refusal(R"({"a/b~c":{"x":1,"x":1}})");
    CHECK(e.code == JsonErrorCode::duplicate_key);
    CHECK(e.message.find("at /a~1b~0c") != std::string::npos);
  }
}

TEST_CASE("integers beyond +/-2^53 are refused, 2^53 itself is not", "[canonical_json]") {
  SECTION("2^53 + 1") {
    const JsonError e = refusal(R"({"amount":9007199254740993})");
    CHECK(e.code == JsonErrorCode::unsafe_integer);
    CHECK(e.message.find("9007199254740993") != std::string::npos);
    CHECK(e.message.find("/amount") != std::string::npos);
    CHECK(e.message.find("string") != std::string::npos);
  }
  SECTION("-(2^53 + 1)") {
    CHECK(refusal("[-9007199254740993]").code == JsonErrorCode::unsafe_integer);
  }
  SECTION("2^64 arrives as a double but is an integer literal") {
    const JsonError e = refusal("[0,18446744073709551616]");
    CHECK(e.code == JsonErrorCode::unsafe_integer);
    CHECK(e.message.find("/1") != std::string::npos);
  }
  SECTION("an integer literal too long even for a double") {
    CHECK(refusal("1" + std::string(400, '0')).code == JsonErrorCode::unsafe_integer);
  }
  SECTION("the limits themselves and large non-integer literals") {
    CHECK(jcs("9007199254740992") == "9007199254740992");
    CHECK(jcs("-9007199254740992") == "-9007199254740992");
    CHECK(jcs("1e30") == "1e+30");
    CHECK(jcs("18446744073709551616.0") == "18446744073709552000");
    // With an exponent it is a double, as docs/SERVE.md says: one action with 2^53.
    CHECK(jcs("9007199254740993e0") == "9007199254740992");
  }
}

TEST_CASE("canonical text of wide doubles reads back as those doubles with as_doubles, and hashes alike",
          "[canonical_json]") {
  // Doubles whose ECMAScript form is an integer literal beyond 2^53: in
  // 64 bits, beyond them, negative, and one shortest form that is not the
  // double's exact value (2^60 + 2^8).
  for (const double d : {1e18, 1e20, -2.5e17, 1152921504606847232.0, 9.999999999999999e20}) {
    const std::string text = canonicalize(Json::array({d}));
    INFO(text);
    JsonError error;
    CHECK_FALSE(parse_strict(text, &error).has_value());  // as input it is still refused
    CHECK(error.code == JsonErrorCode::unsafe_integer);
    const std::optional<Json> read = parse_strict(text, &error, WideIntegers::as_doubles);
    REQUIRE(read.has_value());
    REQUIRE((*read)[0].is_number_float());
    CHECK((*read)[0].get<double>() == d);
    CHECK(canonicalize(*read) == text);
  }
  // Still refused with as_doubles: what no double holds, and ambiguity.
  JsonError error;
  CHECK_FALSE(parse_strict("[1" + std::string(400, '0') + "]", &error, WideIntegers::as_doubles).has_value());
  CHECK_FALSE(parse_strict(R"({"a":1,"a":2})", &error, WideIntegers::as_doubles).has_value());
  CHECK(error.code == JsonErrorCode::duplicate_key);
}

TEST_CASE("numbers that overflow to infinity are refused", "[canonical_json]") {
  CHECK(refusal("1e400").code == JsonErrorCode::non_finite);
  CHECK(refusal(R"({"x":[-1.5e999]})").code == JsonErrorCode::non_finite);
}

TEST_CASE("lone surrogate escapes are refused", "[canonical_json]") {
  CHECK(refusal(R"("\ud800")").code == JsonErrorCode::lone_surrogate);
  CHECK(refusal(R"("\ud800x")").code == JsonErrorCode::lone_surrogate);
  CHECK(refusal(R"("\udc00")").code == JsonErrorCode::lone_surrogate);
  CHECK(refusal(R"({"\udfff":1})").code == JsonErrorCode::lone_surrogate);
  CHECK(jcs(R"("\ud83d\ude00")") == "\"\U0001F600\"");
}

TEST_CASE("invalid UTF-8 is a syntax error with a message that is itself UTF-8", "[canonical_json]") {
  for (const std::string text : {"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xe2\x82\"", "{\"\xf5\x80\x80\x80\":1}"}) {
    const JsonError e = refusal(text);
    CHECK(e.code == JsonErrorCode::syntax);
    CHECK(validate_canonicalizable(Json(e.message), nullptr));
  }
}

TEST_CASE("nesting is limited to kMaxJsonDepth levels", "[canonical_json]") {
  CHECK(jcs(nested_arrays(effectfence::kMaxJsonDepth)) == nested_arrays(effectfence::kMaxJsonDepth));
  CHECK(refusal(nested_arrays(effectfence::kMaxJsonDepth + 1)).code == JsonErrorCode::too_deep);
  CHECK(refusal(std::string(100000, '[')).code == JsonErrorCode::too_deep);
  std::string objects;
  for (int i = 0; i <= effectfence::kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(effectfence::kMaxJsonDepth + 1, '}');
  CHECK(refusal(objects).code == JsonErrorCode::too_deep);
}

TEST_CASE("syntax errors, trailing garbage included, are refused", "[canonical_json]") {
  for (const std::string text : {"", "   ", "{", "[1,]", "{\"a\" 1}", "tru", "'a'", "{\"a\":1} x", "{} {}", "1 2",
                                 "[1]]", "NaN", "01", "\"\t\""}) {
    INFO(text);
    CHECK(refusal(text).code == JsonErrorCode::syntax);
  }
}

TEST_CASE("a NUL byte is refused, never taken for the end of the text", "[canonical_json]") {
  const JsonError e = refusal(std::string("{\"a\":1}\0 trailing", 17));
  CHECK(e.code == JsonErrorCode::syntax);
  CHECK(e.message.find("NUL byte (offset 7)") != std::string::npos);
  CHECK(refusal(std::string("{\"a\":\"x\0y\"}", 11)).code == JsonErrorCode::syntax);
  CHECK(jcs(R"({"a":"x\u0000y"})") == R"({"a":"x\u0000y"})");  // escaped, it is a character like any other
}

TEST_CASE("parse_strict accepts a null error pointer", "[canonical_json]") {
  CHECK_FALSE(parse_strict("{\"a\":1,\"a\":2}", nullptr).has_value());
  CHECK(parse_strict("{}", nullptr).has_value());
}

TEST_CASE("validate_canonicalizable applies the same rules to built values", "[canonical_json]") {
  SECTION("acceptable values") {
    Json value = {{"n", int64_t{-9007199254740992}}, {"u", uint64_t{9007199254740992}}, {"f", 1e300}, {"s", "\u00e9"}};
    CHECK(validate_canonicalizable(value, nullptr));
  }
  SECTION("unsafe integers") {
    CHECK(value_refusal(Json(uint64_t{9007199254740993})).code == JsonErrorCode::unsafe_integer);
    CHECK(value_refusal(Json(int64_t{-9007199254740993})).code == JsonErrorCode::unsafe_integer);
    const JsonError e = value_refusal(Json{{"a", {1, std::numeric_limits<int64_t>::min()}}});
    CHECK(e.code == JsonErrorCode::unsafe_integer);
    CHECK(e.message.find("/a/1") != std::string::npos);
  }
  SECTION("non-finite numbers") {
    CHECK(value_refusal(Json(std::numeric_limits<double>::infinity())).code == JsonErrorCode::non_finite);
    CHECK(value_refusal(Json::array({std::nan("")})).code == JsonErrorCode::non_finite);
  }
  SECTION("invalid UTF-8 in strings and keys") {
    CHECK(value_refusal(Json("\xff")).code == JsonErrorCode::syntax);
    Json bad_key = Json::object();
    bad_key["ok"] = Json::object();
    bad_key["ok"]["\xed\xa0\x80"] = 1;  // an encoded surrogate
    const JsonError e = value_refusal(bad_key);
    CHECK(e.code == JsonErrorCode::syntax);
    CHECK(e.message.find("/ok") != std::string::npos);
    CHECK(validate_canonicalizable(Json(e.message), nullptr));
  }
  SECTION("depth") {
    Json deep = 1;
    for (int i = 0; i < effectfence::kMaxJsonDepth; ++i) deep = Json::array({deep});
    CHECK(validate_canonicalizable(deep, nullptr));
    deep = Json::array({deep});
    CHECK(value_refusal(deep).code == JsonErrorCode::too_deep);
  }
  SECTION("binary has no JSON form") {
    CHECK(value_refusal(Json::binary({1, 2, 3})).code == JsonErrorCode::syntax);
  }
}

TEST_CASE("canonicalize refuses what validation refuses", "[canonical_json]") {
  CHECK_THROWS_AS(canonicalize(Json(uint64_t{1} << 60)), std::invalid_argument);
  CHECK_THROWS_AS(canonicalize(Json{{"x", std::numeric_limits<double>::infinity()}}), std::invalid_argument);
  CHECK_THROWS_AS(canonicalize(Json("\xfe")), std::invalid_argument);
}

TEST_CASE("error codes have stable names", "[canonical_json]") {
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::syntax)) == "syntax");
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::duplicate_key)) == "duplicate_key");
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::unsafe_integer)) == "unsafe_integer");
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::non_finite)) == "non_finite");
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::lone_surrogate)) == "lone_surrogate");
  CHECK(std::string(effectfence::json_error_name(JsonErrorCode::too_deep)) == "too_deep");
}
