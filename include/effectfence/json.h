// Strict JSON input and RFC 8785 canonical output.
//
// Fingerprints and certificates hash canonical bytes, so two different
// payloads must never canonicalize alike. Input that would let that happen is
// refused here, at the door, instead of being silently merged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace effectfence {

using Json = nlohmann::json;

// Why a document was refused. Each names an actionable cause.
enum class JsonErrorCode {
  syntax,            // not JSON (or not UTF-8)
  duplicate_key,     // {"a":1,"a":2}: which one counts is ambiguous
  unsafe_integer,    // integer literal beyond +/-2^53: doubles cannot keep it apart
  non_finite,        // a number that overflows to infinity
  lone_surrogate,    // \ud800 without its pair: not a Unicode string
  too_deep,          // nesting beyond kMaxJsonDepth
};

struct JsonError {
  JsonErrorCode code;
  std::string message;  // says what was wrong and where, e.g. "duplicate key \"a\" at /x"
};

const char* json_error_name(JsonErrorCode code);

constexpr int kMaxJsonDepth = 128;
constexpr int64_t kMaxSafeInteger = 9007199254740992;  // 2^53

// What parse_strict does with integers beyond +/-2^53 that fit 64 bits.
enum class WideIntegers {
  refuse,  // the default: as arguments they could make two actions look alike
  keep,    // kept exactly (a server's 64-bit ids in a result it returns); still
           // not canonicalizable, so never recorded or hashed as they are
  as_doubles,  // read as the doubles they were written from: for canonical
               // text the ledger wrote itself, where RFC 8785 writes the
               // double 1e20 as 100000000000000000000 (what was recorded
               // must read back as it was hashed)
};

// Parses text as one JSON document, refusing everything JsonErrorCode names
// (wide integers as chosen). Returns the value, or fills *error and returns
// nullopt.
std::optional<Json> parse_strict(std::string_view text, JsonError* error,
                                 WideIntegers wide = WideIntegers::refuse);

// Checks an already-built value (e.g. from a library user) against the same
// rules parse_strict applies to text: unsafe integers, non-finite numbers,
// invalid UTF-8 in strings or keys, depth.
// Returns true iff the value is acceptable; otherwise fills *error.
bool validate_canonicalizable(const Json& value, JsonError* error);

// RFC 8785 (JCS): keys sorted by UTF-16 code units, ECMAScript number
// formatting, minimal string escaping, no whitespace.
// REQUIRES: validate_canonicalizable(value) (throws std::invalid_argument otherwise).
std::string canonicalize(const Json& value);
// The same, appended to out (nothing appended when it throws).
void canonicalize_into(const Json& value, std::string& out);

// Appends text as a quoted JSON string, escaped as RFC 8785 escapes it (the
// two-character escapes, \u00xx for other control characters, nothing
// else), which is also how nlohmann's serializer writes it.
// REQUIRES: text is valid UTF-8.
void append_canonical_string(std::string_view text, std::string& out);

// ECMAScript Number::toString of a finite double (RFC 8785 section 3.2.2.3).
// REQUIRES: std::isfinite(value).
std::string format_es_number(double value);

}  // namespace effectfence
