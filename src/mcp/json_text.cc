#include "mcp/json_text.h"

#include "mcp/jsonrpc.h"

namespace effectfence::mcp {

JsonText& JsonText::begin_object() {
  out_ += '{';
  first_member_.push_back(true);
  return *this;
}

JsonText& JsonText::end_object() {
  out_ += '}';
  first_member_.pop_back();
  return *this;
}

JsonText& JsonText::key(std::string_view name) {
  if (!first_member_.back()) out_ += ',';
  first_member_.back() = false;
  string(name);
  out_ += ':';
  return *this;
}

JsonText& JsonText::string(std::string_view text) {
  if (jsonrpc::first_invalid_utf8(text)) {
    // Rare (text from a client is checked when it is read): left to the
    // serializer, which replaces what is not UTF-8.
    out_ += jsonrpc::serialize(Json(std::string(text)));
    return *this;
  }
  append_canonical_string(text, out_);
  return *this;
}

JsonText& JsonText::integer(int64_t value) {
  out_ += std::to_string(value);
  return *this;
}

JsonText& JsonText::null() {
  out_ += "null";
  return *this;
}

JsonText& JsonText::json(const Json& value) {
  out_ += jsonrpc::serialize(value);
  return *this;
}

void append_serialized_as_string(std::string& out, std::string_view text) {
  out.reserve(out.size() + text.size() + text.size() / 8 + 2);
  out += '"';
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '"' && text[i] != '\\') continue;
    out.append(text, start, i - start);
    out += '\\';
    out += text[i];
    start = i + 1;
  }
  out.append(text, start, text.size() - start);
  out += '"';
}

}  // namespace effectfence::mcp
