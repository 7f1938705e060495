// RFC 8785 canonical JSON (src/core/canonical_json.cc) on any bytes:
//  - parse_strict refuses with a named JsonErrorCode and a message, and
//    throws nothing;
//  - what it accepts is canonicalizable, and its canonical text is valid
//    UTF-8 JSON that parses back to the same value;
//  - canonicalizing the canonical text changes nothing.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "effectfence/json.h"
#include "oracle.h"

using namespace effectfence;
using effectfence::fuzz::require;

namespace {

bool named(JsonErrorCode code) {
  switch (code) {
    case JsonErrorCode::syntax:
    case JsonErrorCode::duplicate_key:
    case JsonErrorCode::unsafe_integer:
    case JsonErrorCode::non_finite:
    case JsonErrorCode::lone_surrogate:
    case JsonErrorCode::too_deep:
      return std::string(json_error_name(code)) != "";
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonError error{JsonErrorCode::syntax, ""};
  std::optional<Json> value;
  try {
    value = parse_strict(text, &error);
  } catch (const std::exception& e) {
    fuzz::oracle_failed(std::string("parse_strict threw: ") + e.what());
  }
  if (!value) {
    require(named(error.code), "a refusal without a named code");
    require(!error.message.empty(), "a refusal without a message");
    return 0;
  }
  JsonError why{JsonErrorCode::syntax, ""};
  require(validate_canonicalizable(*value, &why), "parse_strict accepted what validate refuses: " + why.message);
  std::string canonical;
  try {
    canonical = canonicalize(*value);
  } catch (const std::exception& e) {
    fuzz::oracle_failed(std::string("canonicalize threw on an accepted value: ") + e.what());
  }
  if (fuzz::planted() && canonical.size() > 2) canonical.insert(1, " ");
  // The canonical text may hold 1e20 written as 100000000000000000000:
  // read back as the double it was written from.
  JsonError again{JsonErrorCode::syntax, ""};
  const std::optional<Json> back = parse_strict(canonical, &again, WideIntegers::as_doubles);
  require(back.has_value(), "canonical text does not parse: " + again.message + " in " + canonical);
  require(*back == *value, "canonical text parses to another value: " + canonical);
  require(canonicalize(*back) == canonical, "canonicalizing the canonical text changed it: " + canonical);
  return 0;
}
