// The JSON-RPC line reader (classify) and its id recovery on any line.
// Oracle: a request whose id is readable gets exactly one answer, under
// that id. "Readable" is decided here, independently of the code under
// test, by a recognizer of the JSON grammar (RFC 8259, numbers of any size):
// the line is one valid UTF-8 JSON object whose top-level keys are written
// without escapes, with one "id" (a string without escapes, or an integer
// literal within +/-2^53) and a "method". Such a line must classify as a
// Request or as an answered Invalid carrying that id, never as a
// notification, a response or an error under another id.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "mcp/jsonrpc.h"
#include "oracle.h"

using namespace effectfence;
using namespace effectfence::mcp::jsonrpc;
using effectfence::fuzz::require;

namespace {

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

 private:
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
    if (depth > 1000) return false;
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
        if (key == "method") saw_method_ = true;
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
  std::optional<Json> id_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  Message message;
  try {
    message = classify(line);
    (void)recover_id(line);
    (void)recover_answer_id(line);
  } catch (const std::exception& e) {
    fuzz::oracle_failed(std::string("classify threw: ") + e.what());
  }
  std::optional<Json> expected = Grammar(line).readable_request_id();
  if (!expected) return 0;
  if (fuzz::planted()) expected = Json("planted " + expected->dump());
  const std::string shown = std::string(line.substr(0, 300));
  if (const auto* request = std::get_if<Request>(&message)) {
    require(request->id == *expected, "a request answered under " + request->id.dump() + ", not " +
                                          expected->dump() + ": " + shown);
  } else if (const auto* invalid = std::get_if<Invalid>(&message)) {
    require(invalid->answer && !invalid->response,
            "a request with readable id " + expected->dump() + " is left unanswered: " + shown);
    require(invalid->id == *expected, "a request with readable id " + expected->dump() + " answered under " +
                                          invalid->id.dump() + " (" + invalid->message + "): " + shown);
  } else {
    fuzz::oracle_failed("a request with readable id " + expected->dump() +
                        " classified as a notification or response: " + shown);
  }
  return 0;
}
