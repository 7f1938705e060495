// Checks JSON values against the small JSON Schema subset our tools declare,
// so the schema a client reads in tools/list is the rule the server applies.
#pragma once

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

}  // namespace effectfence::mcp
