#include "mcp/schema_check.h"

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
