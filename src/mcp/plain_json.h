// A quick reader for the plain JSON nearly every message is, in front of
// effectfence::parse_strict: parse_strict's lexer keeps every token's text
// for its error messages and its builder looks every key up twice, which
// made it the largest cost of reading a request.
#pragma once

#include <optional>
#include <string_view>

#include "effectfence/json.h"

namespace effectfence::mcp {

// The document text holds, exactly as parse_strict would build it (the same
// values, of the same number types), when text is plain: valid UTF-8 and
// JSON, integers within +/-2^53, no fractions or exponents, no duplicate
// keys, no lone surrogates, at most 64 levels deep. nullopt for anything
// else, valid or not, for parse_strict to read (and to name what is wrong).
std::optional<Json> parse_plain(std::string_view text);

}  // namespace effectfence::mcp
