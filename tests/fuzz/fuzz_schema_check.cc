// The tool-argument schema check (src/mcp/schema_check.cc). Input: a schema
// document, a newline, a value document, both read by parse_strict.
// Oracles: no undefined behaviour (UBSan aborts on any); the compiled form
// answers exactly as schema_violation does, or both throw a JSON type error
// (a keyword of a shape the subset leaves undefined); no other exception.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>

#include "effectfence/json.h"
#include "mcp/schema_check.h"
#include "oracle.h"

using namespace effectfence;
using effectfence::fuzz::require;

namespace {

// The answer, or "<throws>" for a nlohmann JSON error; any other exception
// breaks the oracle.
std::string answer_of(const std::function<std::string()>& check) {
  try {
    return check();
  } catch (const Json::exception&) {
    return "<throws>";
  } catch (const std::exception& e) {
    fuzz::oracle_failed(std::string("schema check threw a non-JSON exception: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return 0;
  JsonError error{JsonErrorCode::syntax, ""};
  const std::optional<Json> schema = parse_strict(input.substr(0, newline), &error);
  const std::optional<Json> value = parse_strict(input.substr(newline + 1), &error);
  if (!schema || !value) return 0;
  const std::string plain = answer_of([&] { return mcp::schema_violation(*schema, *value); });
  std::string compiled = answer_of([&] { return mcp::CompiledSchema(*schema).violation(*value); });
  if (fuzz::planted()) compiled += "!";
  require(compiled == plain, "compiled schema says \"" + compiled + "\", schema_violation \"" + plain +
                                 "\" for schema " + schema->dump() + " and value " + value->dump());
  return 0;
}
