#include "mcp/schema_check.h"

#include <vector>

#include <catch2/catch.hpp>

using effectfence::Json;
using effectfence::mcp::schema_violation;

TEST_CASE("schema_violation checks types, required and unknown fields", "[schema]") {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1},
      "count": {"type": "integer", "minimum": 0, "maximum": 10},
      "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}},
      "clock": {"type": "object", "additionalProperties": {"type": "integer"}}
    },
    "required": ["name"],
    "additionalProperties": false
  })");
  CHECK(schema_violation(schema, Json{{"name", "x"}}) == "");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"count", 3.0}}) == "");
  CHECK(schema_violation(schema, Json::object()) == "/name: required field is missing");
  CHECK(schema_violation(schema, Json{{"name", 3}}) == "/name: must be of type string");
  CHECK(schema_violation(schema, Json{{"name", ""}}) == "/name: must not be empty");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"count", -1}}) == "/count: must be >= 0");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"count", 10}}) == "");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"count", 11}}) == "/count: must be <= 10");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"count", 1.5}}) == "/count: must be of type integer");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"items", {Json::object()}}}) == "/items/0/k: required field is missing");
  CHECK(schema_violation(schema, Json{{"name", "x"}, {"clock", {{"a", "b"}}}}) == "/clock/a: must be of type integer");
  CHECK_THAT(schema_violation(schema, Json{{"name", "x"}, {"nmae", 1}}), Catch::StartsWith("/nmae: unknown field"));
  CHECK(schema_violation(schema, Json::array()) == "/: must be of type object");
}

TEST_CASE("minLength and maxLength count characters, not bytes, as JSON Schema does", "[schema]") {
  const Json schema = Json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  CHECK(schema_violation(schema, Json("\u00e9\u00e9")) == "");        // 2 characters, 4 bytes
  CHECK(schema_violation(schema, Json("\u00e9\u00e9\u00e9")) == "");  // 3 characters, 6 bytes
  CHECK(schema_violation(schema, Json("\u00e9")) == "/: must be at least 2 characters");
  CHECK(schema_violation(schema, Json("abcd")) == "/: must be at most 3 characters");
  CHECK(schema_violation(schema, Json("\U0001F600\U0001F600\U0001F600\U0001F600")) == "/: must be at most 3 characters");
}

// Regression: a length bound beyond size_t (1e30) was converted to size_t,
// which is undefined behaviour (UBSan: float-cast-overflow).
TEST_CASE("length_bound_out_of_range: minLength and maxLength that are no count compare as numbers", "[schema]") {
  CHECK(schema_violation(Json::parse(R"({"maxLength": 1e30})"), Json("abc")) == "");
  CHECK(schema_violation(Json::parse(R"({"minLength": 1e30})"), Json("abc")) ==
        "/: must be at least 1e+30 characters");
  CHECK(schema_violation(Json::parse(R"({"maxLength": -1})"), Json("")) == "/: must be at most -1 characters");
  CHECK(schema_violation(Json::parse(R"({"minLength": -1e300})"), Json("")) == "");
  CHECK(schema_violation(Json::parse(R"({"minLength": 1.0})"), Json("")) == "/: must not be empty");
  CHECK(schema_violation(Json::parse(R"({"maxLength": 2.5})"), Json("abc")) == "/: must be at most 2.5 characters");
  CHECK(schema_violation(Json::parse(R"({"maxLength": 18446744073709551615})"), Json("abc")) == "");
  // The compiled form leaves such bounds to schema_violation, and agrees.
  const effectfence::mcp::CompiledSchema compiled(Json::parse(R"({"type": "string", "maxLength": 1e30})"));
  CHECK(compiled.violation(Json("abc")) == "");
}

TEST_CASE("schema_violation handles const, enum, oneOf and type lists", "[schema]") {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {"status": {"enum": ["a", "b"]}, "parent": {"type": ["string", "null"]}},
    "required": ["status"],
    "oneOf": [
      {"properties": {"status": {"const": "a"}}, "required": ["x"]},
      {"properties": {"status": {"const": "b"}}, "required": ["y"]}
    ]
  })");
  CHECK(schema_violation(schema, Json{{"status", "a"}, {"x", 1}}) == "");
  CHECK(schema_violation(schema, Json{{"status", "b"}, {"y", 1}, {"parent", nullptr}}) == "");
  CHECK(schema_violation(schema, Json{{"status", "c"}}) != "");
  CHECK(schema_violation(schema, Json{{"status", "a"}, {"y", 1}}) != "");
  CHECK(schema_violation(schema, Json{{"status", "b"}, {"y", 1}, {"parent", 3}}) == "/parent: must be of type string or null");
}

namespace {

// Values that reach every branch of the subset: each type, numbers at and
// past bounds, integers written as floats, strings counted by characters,
// unknown and missing members, keys that need escaping in a pointer.
std::vector<Json> tricky_values() {
  std::vector<Json> values = {
      nullptr, true, false, 0, -1, 1, 3.0, 1.5, -0.0, 1e300, 9007199254740992, "", "x", "\u00e9", "abcd",
      "\U0001F600\U0001F600", Json::array(), Json::object(),
  };
  const std::vector<Json> members = {
      Json{{"name", "x"}},
      Json{{"name", ""}},
      Json{{"name", 3}},
      Json{{"name", "x"}, {"count", 3.0}},
      Json{{"name", "x"}, {"count", -1}},
      Json{{"name", "x"}, {"count", 11}},
      Json{{"name", "x"}, {"count", 1.5}},
      Json{{"name", "x"}, {"items", {Json::object(), {{"k", "v"}}}}},
      Json{{"name", "x"}, {"items", {{{"k", 1}}}}},
      Json{{"name", "x"}, {"clock", {{"a", "b"}}}},
      Json{{"name", "x"}, {"clock", {{"a/b~c", 1}, {"d", -2}}}},
      Json{{"name", "x"}, {"nmae", 1}},
      Json{{"a/b", 1}, {"~", 2}},
      Json{{"status", "a"}, {"x", 1}},
      Json{{"status", "b"}, {"y", 1}, {"parent", nullptr}},
      Json{{"status", "b"}, {"y", 1}, {"parent", 3}},
      Json{{"status", "c"}},
      Json{{"status", "a"}, {"x", 1}, {"y", 2}},
      Json::array({1, "two", Json::object()}),
  };
  values.insert(values.end(), members.begin(), members.end());
  return values;
}

}  // namespace

TEST_CASE("a compiled schema answers exactly as schema_violation does", "[schema]") {
  const std::vector<Json> schemas = {
      Json::parse(R"({
        "type": "object",
        "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 3},
          "count": {"type": "integer", "minimum": 0, "maximum": 10},
          "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}},
          "clock": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
        },
        "required": ["name"],
        "additionalProperties": false
      })"),
      Json::parse(R"({
        "type": "object",
        "properties": {"status": {"enum": ["a", "b"]}, "parent": {"type": ["string", "null"]}},
        "required": ["status"],
        "oneOf": [
          {"properties": {"status": {"const": "a"}}, "required": ["x"]},
          {"properties": {"status": {"const": "b"}}, "required": ["y"]}
        ]
      })"),
      Json::parse(R"({"anyOf": [{"type": "string", "minLength": 2}, {"type": "integer", "maximum": 0}], "oneOf": []})"),
      Json::parse(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"),
      Json::parse(R"({"type": "object", "additionalProperties": true, "properties": {"a/b": {"const": 2}}})"),
      Json::parse(R"({"type": "object", "additionalProperties": false})"),
      Json::parse(R"({"type": ["frobnicate"], "items": 7})"),
      Json::parse(R"({"type": [], "description": "nothing conforms"})"),
      Json::parse(R"({"type": 5, "items": {"const": "two"}})"),
      Json::parse(R"({"anyOf": []})"),
      Json::parse(R"(true)"),
      // Shapes outside the subset, which the compiled form leaves to schema_violation.
      Json::parse(R"({"type": "string", "minLength": 1.0})"),
      Json::parse(R"({"type": "object", "required": "name"})"),
      Json::parse(R"({"enum": "x"})"),
      Json::parse(R"({"oneOf": {"a": {"type": "string"}}})"),
      Json::parse(R"({"type": "object", "properties": [{"type": "string"}]})"),
      Json{{"type", "string"}, {"minLength", 1}, {"maxLength", 2}},  // signed counts, as the fence tools write them
  };
  for (const Json& schema : schemas) {
    const effectfence::mcp::CompiledSchema compiled(schema);
    for (const Json& value : tricky_values()) {
      INFO("schema " << schema.dump() << ", value " << value.dump());
      std::string expected;
      bool threw = false;
      try {
        expected = schema_violation(schema, value);
      } catch (const std::exception&) {
        threw = true;
      }
      if (threw) {
        CHECK_THROWS(compiled.violation(value));
      } else {
        CHECK(compiled.violation(value) == expected);
      }
    }
  }
}
