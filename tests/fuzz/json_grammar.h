// An independent reader of what a JSON-RPC line says, for the oracles of
// the harnesses that feed lines to the code under test (jsonrpc, stdio,
// http): a recursive-descent recognizer of RFC 8259 JSON (numbers of any
// size) that shares no code with src/core's parsers.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "effectfence/json.h"
#include "mcp/jsonrpc.h"

namespace effectfence::fuzz {

// A recursive-descent recognizer of RFC 8259 JSON. Depth is bounded so a
// deep input cannot exhaust the harness's own stack.
class Grammar {
 public:
  explicit Grammar(std::string_view s) : s_(s) {}

  // The top-level id's expected value when the line is a request with a
  // readable id, else nullopt.
  std::optional<Json> readable_request_id() {
    ws();
    if (!object(0, /*top=*/true)) return std::nullopt;
    ws();
    if (i_ != s_.size() || ids_ != 1 || !saw_method_ || escaped_top_key_) return std::nullopt;
    return id_;
  }

  // What a whole line says, as far as it can be told without the code under test.
  struct Reading {
    bool json = false;      // one JSON value (RFC 8259, valid UTF-8), nothing else
    bool too_deep = false;  // nested beyond what this reader follows: json unknown
    // A number token a double cannot hold (1e400): the server reads past it
    // as if it were a small number, so a malformed one (01e400) is not
    // told from a well-formed one there.
    bool huge_number = false;
    bool object = false;    // json, and an object
    bool plain_keys = false;  // object, its top-level keys written without escapes
    int ids = 0;              // top-level "id" members (2: also when one is not readable)
    std::optional<Json> id;   // the one readable id
    bool method = false;      // a top-level "method"
    std::optional<std::string> method_name;  // its value, when a string without escapes
    // A request with one readable id: answered exactly once, under it.
    bool readable_request() const { return object && plain_keys && method && ids == 1 && id.has_value(); }
    bool jsonrpc_2 = false;          // a top-level "jsonrpc": "2.0"
    bool result_or_error = false;    // a top-level "result" or "error"
    // A JSON-RPC 2.0 notification beyond doubt: never answered.
    bool plain_notification() const {
      return object && plain_keys && method_name && ids == 0 && jsonrpc_2 && !result_or_error;
    }
  };
  Reading read() {
    Reading r;
    ws();
    const bool starts_object = i_ < s_.size() && s_[i_] == '{';
    const bool ok = starts_object ? object(0, /*top=*/true) : value(0);
    ws();
    r.too_deep = too_deep_;
    r.huge_number = has_huge_number(s_);
    r.json = ok && i_ == s_.size();
    if (!r.json) return r;
    r.object = starts_object;
    r.plain_keys = !escaped_top_key_;
    r.ids = ids_;
    if (ids_ == 1) r.id = id_;
    r.method = saw_method_;
    r.method_name = method_name_;
    r.jsonrpc_2 = jsonrpc_2_;
    r.result_or_error = result_or_error_;
    return r;
  }

 private:
  static bool has_huge_number(std::string_view s) {
    bool in_string = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      if (c != '-' && !std::isdigit(static_cast<unsigned char>(c))) continue;
      size_t end = i + 1;
      while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.' || s[end] == 'e' ||
                                s[end] == 'E' || s[end] == '+' || s[end] == '-')) {
        ++end;
      }
      if (std::isinf(std::strtod(std::string(s.substr(i, end - i)).c_str(), nullptr))) return true;
      i = end - 1;
    }
    return false;
  }

  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool value(int depth) {
    if (depth > 1000) {
      too_deep_ = true;
      return false;
    }
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return object(depth + 1, false);
    if (c == '[') return array(depth + 1);
    if (c == '"') return string(nullptr, nullptr);
    if (c == '-' || (c >= '0' && c <= '9')) return number(nullptr);
    for (std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return true;
      }
    }
    return false;
  }
  bool array(int depth) {
    if (!eat('[')) return false;
    ws();
    if (eat(']')) return true;
    do {
      if (!value(depth)) return false;
      ws();
    } while (eat(','));
    return eat(']');
  }
  bool object(int depth, bool top) {
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return true;
    do {
      ws();
      std::string key;
      bool escaped = false;
      if (!string(&key, &escaped)) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      if (top) {
        escaped_top_key_ = escaped_top_key_ || escaped;
        if (key == "method") {
          saw_method_ = true;
          if (i_ < s_.size() && s_[i_] == '"') {
            std::string name;
            bool name_escaped = false;
            const size_t start = i_;
            if (string(&name, &name_escaped) && !name_escaped) method_name_ = name;
            i_ = start;
          }
        }
        if (key == "result" || key == "error") result_or_error_ = true;
        if (key == "jsonrpc") jsonrpc_2_ = s_.substr(i_, 5) == "\"2.0\"";
        if (key == "id") {
          ++ids_;
          id_ = id_value();
          if (!id_) {
            ids_ = 2;  // present but not readable
            if (!value(depth)) return false;
          }
        } else if (!value(depth)) {
          return false;
        }
      } else if (!value(depth)) {
        return false;
      }
      ws();
    } while (eat(','));
    return eat('}');
  }
  // An id as JSON-RPC ids go: a string without escapes, or an integer
  // literal within +/-2^53. Consumes it; nullopt (consuming nothing) otherwise.
  std::optional<Json> id_value() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '"') {
      std::string text;
      bool escaped = false;
      if (string(&text, &escaped) && !escaped) return Json(text);
    } else {
      std::string literal;
      if (number(&literal) && literal.find_first_of(".eE") == std::string::npos && literal.size() <= 17) {
        const long long v = std::stoll(literal);
        if (v <= kMaxSafeInteger && v >= -kMaxSafeInteger) return Json(v);
      }
    }
    i_ = start;
    return std::nullopt;
  }
  bool number(std::string* literal) {
    const size_t start = i_;
    eat('-');
    if (eat('0')) {
    } else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') {
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    } else {
      return false;
    }
    if (eat('.')) {
      if (!digits()) return false;
    }
    if (eat('e') || eat('E')) {
      if (!eat('+')) eat('-');
      if (!digits()) return false;
    }
    if (literal) *literal = std::string(s_.substr(start, i_ - start));
    return true;
  }
  bool digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  // A string with valid UTF-8 and valid escapes; *text gets its raw bytes.
  bool string(std::string* text, bool* escaped) {
    if (!eat('"')) return false;
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (escaped) *escaped = true;
        if (++i_ >= s_.size()) return false;
        const char e = s_[i_];
        if (e == 'u') {
          for (int k = 1; k <= 4; ++k) {
            if (i_ + k >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_ + k]))) return false;
          }
          i_ += 5;
        } else if (std::string_view("\"\\/bfnrt").find(e) != std::string_view::npos) {
          ++i_;
        } else {
          return false;
        }
        continue;
      }
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i_ + len > s_.size()) return false;
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < len; ++k) {
        const unsigned char d = static_cast<unsigned char>(s_[i_ + k]);
        if ((d >> 6) != 2) return false;
        cp = (cp << 6) | (d & 0x3F);
      }
      const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      if (text) text->append(s_.substr(i_, len));
      i_ += len;
    }
    return false;
  }

  std::string_view s_;
  size_t i_ = 0;
  int ids_ = 0;
  bool saw_method_ = false;
  bool escaped_top_key_ = false;
  bool too_deep_ = false;
  bool jsonrpc_2_ = false;
  bool result_or_error_ = false;
  std::optional<Json> id_;
  std::optional<std::string> method_name_;
};

}  // namespace effectfence::fuzz
