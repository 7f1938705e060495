#include "mcp/json_text.h"

#include "mcp/jsonrpc.h"

namespace effectfence::mcp {
namespace {

// As nlohmann's serializer escapes a string that is valid UTF-8 with
// ensure_ascii off: the two-character escapes, \u00xx (lowercase) for other
// control characters, everything else as it is.
void append_escaped(std::string& out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
}

}  // namespace

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
  out_ += '"';
  append_escaped(out_, text);
  out_ += '"';
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
