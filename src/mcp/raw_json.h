// JSON text relayed as it was sent. nlohmann::json keeps objects in a
// std::map, so a value parsed and written again comes out with its keys
// sorted (and its numbers respelt). What wrap relays between an agent and a
// child server must reach the other side as it was written, so it is kept
// as text: a raw node is that text inside a Json tree (a binary value of
// its own subtype), which jsonrpc::serialize writes out verbatim. The
// functions on object texts edit one member in place, leaving every other
// byte as it was.
//
// Every text given to these functions must be one valid JSON value (e.g. a
// member of a line jsonrpc::classify accepted); they do not check it again.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "effectfence/json.h"

namespace effectfence::mcp {

// A node that serialize() writes as text, byte for byte.
// REQUIRES: text is one valid JSON value, in valid UTF-8.
Json raw_json(std::string_view text);
bool is_raw_json(const Json& value);
// REQUIRES: is_raw_json(value).
std::string raw_json_text(const Json& value);

// The text of the top-level member key of the object in text (whitespace
// around it left out), or nullopt when text is no object or has no such key.
std::optional<std::string_view> member_text(std::string_view text, std::string_view key);
// raw_json(member_text(line, key)), or null when there is no such member:
// what a message carried under key, as it was written.
Json sent_member(std::string_view line, std::string_view key);
// object_text with the value of member key replaced by value_text, where it
// stands; appended as the last member when there is none.
// REQUIRES: object_text is an object.
std::string with_member_text(std::string_view object_text, std::string_view key, std::string_view value_text);
// object_text without member key (unchanged when it has none).
// REQUIRES: object_text is an object.
std::string without_member_text(std::string_view object_text, std::string_view key);
// The text of each element of the array in text; empty when it is no array.
std::vector<std::string_view> element_texts(std::string_view text);
// True iff text (trimmed) is a JSON object.
bool is_object_text(std::string_view text);

// What jsonrpc::serialize writes for value: nlohmann's compact dump, with
// raw nodes written as their text.
std::string serialize_with_raw(const Json& value);

}  // namespace effectfence::mcp
