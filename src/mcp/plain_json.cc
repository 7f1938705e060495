#include "mcp/plain_json.h"

#include <cstdint>
#include <string>
#include <utility>

#include "mcp/jsonrpc.h"

namespace effectfence::mcp {
namespace {

constexpr int kMaxPlainDepth = 64;  // below parse_strict's kMaxJsonDepth

// Recursive descent over text; every method returns false as soon as the
// text stops being plain, and the caller gives up.
class PlainReader {
 public:
  explicit PlainReader(std::string_view text) : text_(text) {}

  bool document(Json* out) {
    skip_space();
    if (!value(out, 0)) return false;
    skip_space();
    return at_ == text_.size();
  }

 private:
  bool value(Json* out, int depth) {
    if (at_ >= text_.size()) return false;
    switch (text_[at_]) {
      case '{': return object(out, depth + 1);
      case '[': return array(out, depth + 1);
      case '"': {
        std::string s;
        if (!string(&s)) return false;
        *out = std::move(s);
        return true;
      }
      case 't': return literal("true", Json(true), out);
      case 'f': return literal("false", Json(false), out);
      case 'n': return literal("null", Json(nullptr), out);
      default: return integer(out);
    }
  }

  bool object(Json* out, int depth) {
    if (depth > kMaxPlainDepth) return false;
    ++at_;  // '{'
    *out = Json::object();
    auto& members = out->get_ref<Json::object_t&>();
    skip_space();
    if (peek('}')) return true;
    for (;;) {
      std::string key;
      if (!peek_char('"') || !string(&key)) return false;
      skip_space();
      if (!peek(':')) return false;
      skip_space();
      Json member;
      if (!value(&member, depth)) return false;
      if (!members.emplace(std::move(key), std::move(member)).second) return false;  // a duplicate key
      skip_space();
      if (peek('}')) return true;
      if (!peek(',')) return false;
      skip_space();
    }
  }

  bool array(Json* out, int depth) {
    if (depth > kMaxPlainDepth) return false;
    ++at_;  // '['
    *out = Json::array();
    auto& elements = out->get_ref<Json::array_t&>();
    skip_space();
    if (peek(']')) return true;
    for (;;) {
      elements.emplace_back();
      if (!value(&elements.back(), depth)) return false;
      skip_space();
      if (peek(']')) return true;
      if (!peek(',')) return false;
      skip_space();
    }
  }

  // REQUIRES: text_[at_] == '"'. The text is valid UTF-8 (checked up front),
  // so bytes beyond ASCII are copied as they are.
  bool string(std::string* out) {
    ++at_;
    for (;;) {
      const size_t start = at_;
      while (at_ < text_.size() && text_[at_] != '"' && text_[at_] != '\\' &&
             static_cast<unsigned char>(text_[at_]) >= 0x20) {
        ++at_;
      }
      out->append(text_.data() + start, at_ - start);
      if (at_ >= text_.size() || static_cast<unsigned char>(text_[at_]) < 0x20) return false;
      if (text_[at_++] == '"') return true;
      if (!escape(out)) return false;
    }
  }

  bool escape(std::string* out) {
    if (at_ >= text_.size()) return false;
    const char c = text_[at_++];
    switch (c) {
      case '"': *out += '"'; return true;
      case '\\': *out += '\\'; return true;
      case '/': *out += '/'; return true;
      case 'b': *out += '\b'; return true;
      case 'f': *out += '\f'; return true;
      case 'n': *out += '\n'; return true;
      case 'r': *out += '\r'; return true;
      case 't': *out += '\t'; return true;
      case 'u': break;
      default: return false;
    }
    uint32_t unit = 0;
    if (!hex4(&unit)) return false;
    if (unit >= 0xDC00 && unit <= 0xDFFF) return false;  // a lone low surrogate
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      uint32_t low = 0;
      if (!(peek('\\') && peek('u') && hex4(&low)) || low < 0xDC00 || low > 0xDFFF) return false;
      unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(unit, out);
    return true;
  }

  bool hex4(uint32_t* unit) {
    if (at_ + 4 > text_.size()) return false;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[at_++];
      uint32_t digit = 0;
      if (c >= '0' && c <= '9') digit = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') digit = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') digit = static_cast<uint32_t>(c - 'A' + 10);
      else return false;
      *unit = (*unit << 4) | digit;
    }
    return true;
  }

  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // As nlohmann reads integers: unsigned unless negative. A fraction, an
  // exponent or a magnitude beyond 2^53 is not plain.
  bool integer(Json* out) {
    const bool negative = peek('-');
    const size_t digits = at_;
    uint64_t magnitude = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      magnitude = magnitude * 10 + static_cast<uint64_t>(text_[at_] - '0');
      if (magnitude > static_cast<uint64_t>(kMaxSafeInteger)) return false;
      ++at_;
    }
    const size_t count = at_ - digits;
    if (count == 0 || (count > 1 && text_[digits] == '0')) return false;  // none, or a leading zero
    if (at_ < text_.size() && (text_[at_] == '.' || text_[at_] == 'e' || text_[at_] == 'E')) return false;
    if (negative) *out = -static_cast<int64_t>(magnitude);
    else *out = magnitude;
    return true;
  }

  bool literal(std::string_view word, Json value, Json* out) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    *out = std::move(value);
    return true;
  }

  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }

  // Consumes c if it comes next.
  bool peek(char c) {
    if (at_ >= text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  // Whether c comes next, without consuming it.
  bool peek_char(char c) const { return at_ < text_.size() && text_[at_] == c; }

  const std::string_view text_;
  size_t at_ = 0;
};

}  // namespace

std::optional<Json> parse_plain(std::string_view text) {
  // A NUL (which parse_strict names) or a byte that is not UTF-8 anywhere: not plain.
  if (text.find('\0') != std::string_view::npos || jsonrpc::first_invalid_utf8(text)) return std::nullopt;
  Json document;
  if (!PlainReader(text).document(&document)) return std::nullopt;
  return document;
}

}  // namespace effectfence::mcp
