// JSON text written straight into a string, byte for byte as
// jsonrpc::serialize writes the same value (nlohmann's dump, no spaces,
// invalid UTF-8 replaced), without building the tree first: for the results
// sent on every call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "effectfence/json.h"

namespace effectfence::mcp {

class JsonText {
 public:
  // Objects and scalars (arrays come only inside json()). An object's
  // members must come in the order serialize writes them: keys sorted
  // bytewise (nlohmann keeps objects in a std::map).
  JsonText& begin_object();
  JsonText& end_object();
  JsonText& key(std::string_view name);
  JsonText& string(std::string_view text);
  JsonText& integer(int64_t value);
  JsonText& null();
  // A value that is a tree already (a tool's args, its result).
  JsonText& json(const Json& value);
  // A string or integer member, key and value in one.
  JsonText& member(std::string_view name, std::string_view text) { return key(name).string(text); }
  JsonText& member(std::string_view name, int64_t value) { return key(name).integer(value); }

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::vector<bool> first_member_;  // per open object: nothing written in it yet
};

// text as a JSON string, escaped as serialize(Json(text)) would escape it.
// REQUIRES: text is what serialize or JsonText wrote: valid UTF-8 with no
// control characters, so only quotes and backslashes need escaping.
void append_serialized_as_string(std::string& out, std::string_view text);

}  // namespace effectfence::mcp
