// Checks JSON values against the small JSON Schema subset our tools declare,
// so the schema a client reads in tools/list is the rule the server applies.
#pragma once

#include <memory>
#include <string>

#include "effectfence/json.h"

namespace effectfence::mcp {

// Supported keywords: type (a name or a list), properties, required,
// additionalProperties (bool or schema), items, enum, const, minLength, maxLength,
// minimum, maximum, oneOf, anyOf. Others (title, description, ...) are ignored.
// "integer" accepts a number with no fractional part, as JSON Schema does.
//
// Returns "" iff value conforms; otherwise one message naming where and what,
// e.g. "/read_set/0/seq: must be >= 0".
std::string schema_violation(const Json& schema, const Json& value);

// The same check, with the schema read once instead of on every call: its
// keywords looked up, its messages' fixed parts written, and a value's path
// spelled out only for the message about it. A schema whose keywords have
// shapes the subset does not define (a "required" that is not a list of
// names, a "minLength" that is not a count, ...) is checked by
// schema_violation itself, so every schema gets exactly its answers.
class CompiledSchema {
 public:
  explicit CompiledSchema(Json schema);
  ~CompiledSchema();
  CompiledSchema(CompiledSchema&&) noexcept;
  CompiledSchema& operator=(CompiledSchema&&) noexcept;

  // schema_violation(schema, value).
  std::string violation(const Json& value) const;

  struct Node;

 private:
  std::unique_ptr<const Json> schema_;  // the nodes point into it
  std::unique_ptr<const Node> root_;    // null: checked by schema_violation
};

}  // namespace effectfence::mcp
