#include "effectfence/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

namespace effectfence {
namespace {

// ---------------------------------------------------------------------------
// UTF-8

// Length of the well-formed UTF-8 sequence starting at text[i], or 0 when the
// bytes there are ill-formed (overlong forms, encoded surrogates and code
// points beyond U+10FFFF included), per Unicode table 3-7.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // U+D800..U+DFFF
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < second_min || byte(i + 1) > second_max) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// REQUIRES: is_valid_utf8(text).
std::u16string to_utf16(std::string_view text) {
  std::u16string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    uint32_t code_point = length == 1 ? lead : lead & (0xFFu >> (length + 1));
    for (size_t k = 1; k < length; ++k) {
      code_point = (code_point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
    }
    if (code_point < 0x10000) {
      out.push_back(static_cast<char16_t>(code_point));
    } else {
      code_point -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (code_point >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (code_point & 0x3FF)));
    }
    i += length;
  }
  return out;
}

// Error messages end up inside JSON responses, so they must themselves be
// valid UTF-8: ill-formed bytes are shown as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", static_cast<unsigned char>(text[i]));
      out += escaped;
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Canonical strings (RFC 8785 section 3.2.2.2)

}  // namespace

void append_canonical_string(std::string_view text, std::string& out) {
  out += '"';
  // Runs that need no escape are copied whole: most text has no escape at all.
  size_t run = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) continue;
    out.append(text, run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
        out += escaped;
      }
    }
  }
  out.append(text, run, text.size() - run);
  out += '"';
}

namespace {

std::string json_quoted(std::string_view text) {
  std::string out;
  append_canonical_string(printable(text), out);
  return out;
}

// ---------------------------------------------------------------------------
// Locations (RFC 6901 JSON pointers)

std::string pointer_token(std::string_view token) {
  std::string out;
  for (const char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string join_pointer(const std::vector<std::string>& tokens) {
  std::string out;
  for (const std::string& token : tokens) out += "/" + pointer_token(token);
  return out;
}

// "at /a/0", or "at the top level" for the empty pointer, which would
// otherwise read as a missing word.
std::string location(const std::string& pointer) {
  return pointer.empty() ? "at the top level" : "at " + printable(pointer);
}

// ---------------------------------------------------------------------------
// Rules shared by text and values

bool is_safe_magnitude(uint64_t magnitude) {
  return magnitude <= static_cast<uint64_t>(kMaxSafeInteger);
}

bool is_safe_integer(int64_t value) {
  return value >= -kMaxSafeInteger && value <= kMaxSafeInteger;
}

JsonError make_error(JsonErrorCode code, std::string message) {
  return JsonError{code, std::move(message)};
}

JsonError unsafe_integer_error(const std::string& literal, const std::string& pointer) {
  return make_error(JsonErrorCode::unsafe_integer,
                    "integer " + literal + " " + location(pointer) +
                        " is beyond \u00b12^53 and would lose precision; send it as a string");
}

JsonError non_finite_error(const std::string& literal, const std::string& pointer) {
  return make_error(JsonErrorCode::non_finite,
                    "number " + literal + " " + location(pointer) +
                        " overflows a double to infinity; send it as a string");
}

JsonError too_deep_error(const std::string& pointer) {
  return make_error(JsonErrorCode::too_deep,
                    "nesting " + location(pointer) + " exceeds " + std::to_string(kMaxJsonDepth) +
                        " levels; flatten the document");
}

JsonError duplicate_key_error(const std::string& key, const std::string& object_pointer) {
  return make_error(JsonErrorCode::duplicate_key,
                    "duplicate key " + json_quoted(key) + " in the object " + location(object_pointer) +
                        "; each key may appear only once");
}

JsonError invalid_utf8_error(const std::string& what, const std::string& pointer) {
  return make_error(JsonErrorCode::syntax,
                    what + " " + location(pointer) + " is not valid UTF-8; send Unicode text");
}

// A literal without fraction or exponent denotes an integer, whatever type
// the lexer had to fall back to in order to hold it.
bool is_integer_literal(const std::string& literal) {
  return !literal.empty() && literal.find_first_of(".eE") == std::string::npos;
}

void report(JsonError* error, JsonError value) {
  if (error != nullptr) *error = std::move(value);
}

// ---------------------------------------------------------------------------
// Strict parsing: a SAX handler that builds the value like nlohmann's DOM
// parser but refuses what would make two payloads indistinguishable.

class StrictBuilder final : public Json::json_sax_t {
 public:
  explicit StrictBuilder(WideIntegers wide) : wide_(wide) {}
  Json& result() { return root_; }
  const JsonError& error() const { return error_; }

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool value) override { return add(Json(value)); }

  bool number_integer(number_integer_t value) override {
    if (!is_safe_integer(value)) return wide(value);
    return add(Json(value));
  }

  bool number_unsigned(number_unsigned_t value) override {
    if (!is_safe_magnitude(value)) return wide(value);
    return add(Json(value));
  }

  bool number_float(number_float_t value, const string_t& literal) override {
    // Integers too wide for 64 bits arrive here, already rounded: the
    // nearest double, which is the one such text was written from.
    if (is_integer_literal(literal) && wide_ != WideIntegers::as_doubles) {
      return fail(unsafe_integer_error(literal, value_pointer()));
    }
    if (!std::isfinite(value)) return fail(non_finite_error(literal, value_pointer()));
    return add(Json(value));
  }

  bool string(string_t& value) override { return add(Json(std::move(value))); }

  bool binary(binary_t& /*value*/) override {
    return fail(make_error(JsonErrorCode::syntax, "binary values are not JSON"));
  }

  bool start_object(std::size_t /*elements*/) override { return open(Json::object()); }

  bool key(string_t& key) override {
    Frame& frame = frames_.back();
    if (frame.container->contains(key)) return fail(duplicate_key_error(key, container_pointer()));
    frame.key = key;
    return true;
  }

  bool end_object() override { return close(); }
  bool start_array(std::size_t /*elements*/) override { return open(Json::array()); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t /*position*/, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    return fail(lexer_error(last_token, ex));
  }

 private:
  struct Frame {
    Json* container;
    std::string key;  // objects: the key of the member being read
  };

  bool fail(JsonError error) {
    error_ = std::move(error);
    return false;
  }

  // An integer beyond +/-2^53 that fits 64 bits, as the caller chose.
  template <typename Integer>
  bool wide(Integer value) {
    switch (wide_) {
      case WideIntegers::refuse:
        return fail(unsafe_integer_error(std::to_string(value), value_pointer()));
      case WideIntegers::keep:
        return add(Json(value));
      case WideIntegers::as_doubles:
        // The shortest text of a double reads back, rounded to nearest, as that double.
        return add(Json(static_cast<double>(value)));
    }
    return fail(unsafe_integer_error(std::to_string(value), value_pointer()));
  }

  // Places value where the document is currently being read and returns
  // where it landed.
  Json* place(Json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& frame = frames_.back();
    if (frame.container->is_array()) {
      frame.container->push_back(std::move(value));
      return &frame.container->back();
    }
    Json& slot = (*frame.container)[frame.key];
    slot = std::move(value);
    return &slot;
  }

  bool add(Json value) {
    place(std::move(value));
    return true;
  }

  bool open(Json empty_container) {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) return fail(too_deep_error(value_pointer()));
    Json* container = place(std::move(empty_container));
    frames_.push_back(Frame{container, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  // The pointer token of the child being read inside frame i: a member key,
  // or an array index (the last element once the child has been placed).
  std::string token_of(size_t frame_index, bool child_already_placed) const {
    const Frame& frame = frames_[frame_index];
    if (frame.container->is_object()) return frame.key;
    const size_t size = frame.container->size();
    return std::to_string(child_already_placed ? size - 1 : size);
  }

  // Where the next value will be placed.
  std::string value_pointer() const {
    std::vector<std::string> tokens;
    for (size_t i = 0; i < frames_.size(); ++i) tokens.push_back(token_of(i, i + 1 < frames_.size()));
    return join_pointer(tokens);
  }

  // Where the innermost open container sits.
  std::string container_pointer() const {
    std::vector<std::string> tokens;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) tokens.push_back(token_of(i, true));
    return join_pointer(tokens);
  }

  JsonError lexer_error(const std::string& last_token, const nlohmann::detail::exception& ex) const {
    constexpr int kNumberOverflow = 406;  // nlohmann's out_of_range id for +/-inf
    if (ex.id == kNumberOverflow) {
      return is_integer_literal(last_token) ? unsafe_integer_error(last_token, value_pointer())
                                            : non_finite_error(last_token, value_pointer());
    }
    const std::string detail = without_exception_prefix(ex.what());
    if (detail.find("surrogate") != std::string::npos) {
      return make_error(JsonErrorCode::lone_surrogate,
                        "lone UTF-16 surrogate escape: " + detail +
                            "; escape a character beyond U+FFFF as a high+low surrogate pair");
    }
    return make_error(JsonErrorCode::syntax, "not valid JSON: " + detail);
  }

  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
  static std::string without_exception_prefix(const std::string& what) {
    const size_t end = what.rfind("] ", what.find(' '));
    return printable(end == std::string::npos ? what : what.substr(end + 2));
  }

  const WideIntegers wide_;
  Json root_;
  std::vector<Frame> frames_;
  JsonError error_{JsonErrorCode::syntax, "not valid JSON"};
};

// ---------------------------------------------------------------------------
// Validation of built values

class Validator {
 public:
  std::optional<JsonError> check(const Json& value, int depth) {
    switch (value.type()) {
      case Json::value_t::number_integer:
        if (!is_safe_integer(value.get<int64_t>())) {
          return unsafe_integer_error(std::to_string(value.get<int64_t>()), join_pointer(path_));
        }
        return std::nullopt;
      case Json::value_t::number_unsigned:
        if (!is_safe_magnitude(value.get<uint64_t>())) {
          return unsafe_integer_error(std::to_string(value.get<uint64_t>()), join_pointer(path_));
        }
        return std::nullopt;
      case Json::value_t::number_float:
        if (!std::isfinite(value.get<double>())) return non_finite_error(format_es_number(value.get<double>()), join_pointer(path_));
        return std::nullopt;
      case Json::value_t::string:
        if (!is_valid_utf8(value.get_ref<const std::string&>())) return invalid_utf8_error("string", join_pointer(path_));
        return std::nullopt;
      case Json::value_t::array:
        return check_array(value, depth + 1);
      case Json::value_t::object:
        return check_object(value, depth + 1);
      case Json::value_t::null:
      case Json::value_t::boolean:
        return std::nullopt;
      case Json::value_t::binary:
      case Json::value_t::discarded:
        break;
    }
    return make_error(JsonErrorCode::syntax, "value " + location(join_pointer(path_)) + " has no JSON form");
  }

 private:
  std::optional<JsonError> check_array(const Json& array, int depth) {
    if (depth > kMaxJsonDepth) return too_deep_error(join_pointer(path_));
    for (size_t i = 0; i < array.size(); ++i) {
      path_.push_back(std::to_string(i));
      std::optional<JsonError> error = check(array[i], depth);
      path_.pop_back();
      if (error) return error;
    }
    return std::nullopt;
  }

  std::optional<JsonError> check_object(const Json& object, int depth) {
    if (depth > kMaxJsonDepth) return too_deep_error(join_pointer(path_));
    for (auto member = object.begin(); member != object.end(); ++member) {
      if (!is_valid_utf8(member.key())) return invalid_utf8_error("key " + json_quoted(member.key()), join_pointer(path_));
      path_.push_back(member.key());
      std::optional<JsonError> error = check(member.value(), depth);
      path_.pop_back();
      if (error) return error;
    }
    return std::nullopt;
  }

  std::vector<std::string> path_;
};

// ---------------------------------------------------------------------------
// Canonical serialization (RFC 8785 section 3.2)

void append_canonical(const Json& value, std::string& out);

// Whether a key holds a character at U+E000 or above (lead byte 0xEE to
// 0xF4), the only ones whose UTF-8 byte order and UTF-16 code unit order
// can differ: U+10000 and above are surrogates (0xD800...) in UTF-16.
bool sorts_apart_in_utf16(std::string_view key) {
  for (const char c : key) {
    if (static_cast<unsigned char>(c) >= 0xEE) return true;
  }
  return false;
}

void append_canonical_member(const std::string& key, const Json& value, bool first, std::string& out) {
  if (!first) out += ',';
  append_canonical_string(key, out);
  out += ':';
  append_canonical(value, out);
}

void append_canonical_object(const Json& object, std::string& out) {
  // RFC 8785 3.2.3: members sorted by the UTF-16 code units of their keys.
  // The object's map holds them in UTF-8 byte order, which is the same
  // order unless some key sorts apart in UTF-16.
  bool map_order = true;
  for (auto member = object.begin(); member != object.end() && map_order; ++member) {
    map_order = !sorts_apart_in_utf16(member.key());
  }
  if (map_order) {
    out += '{';
    bool first = true;
    for (auto member = object.begin(); member != object.end(); ++member) {
      append_canonical_member(member.key(), member.value(), first, out);
      first = false;
    }
    out += '}';
    return;
  }
  std::vector<std::pair<std::u16string, Json::const_iterator>> members;
  members.reserve(object.size());
  for (auto member = object.begin(); member != object.end(); ++member) {
    members.emplace_back(to_utf16(member.key()), member);
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out += '{';
  bool first = true;
  for (const auto& member : members) {
    append_canonical_member(member.second.key(), member.second.value(), first, out);
    first = false;
  }
  out += '}';
}

void append_canonical_array(const Json& array, std::string& out) {
  out += '[';
  bool first = true;
  for (const Json& element : array) {
    if (!first) out += ',';
    first = false;
    append_canonical(element, out);
  }
  out += ']';
}

void append_canonical(const Json& value, std::string& out) {
  switch (value.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: out += std::to_string(value.get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(value.get<uint64_t>()); return;
    case Json::value_t::number_float: out += format_es_number(value.get<double>()); return;
    case Json::value_t::string: append_canonical_string(value.get_ref<const std::string&>(), out); return;
    case Json::value_t::array: append_canonical_array(value, out); return;
    case Json::value_t::object: append_canonical_object(value, out); return;
    case Json::value_t::binary:
    case Json::value_t::discarded: return;  // refused by validation beforehand
  }
}

// ---------------------------------------------------------------------------
// ECMAScript number formatting

// The shortest round-tripping digits of |value| and its decimal exponent,
// value = 0.d1d2d3... * 10^n in ECMA-262's terms (n = scientific exponent + 1).
struct ShortestDecimal {
  std::string digits;
  int n = 0;
};

ShortestDecimal shortest_decimal(double magnitude) {
  char buffer[64];
  const auto written = std::to_chars(buffer, buffer + sizeof buffer, magnitude, std::chars_format::scientific);
  const std::string_view text(buffer, static_cast<size_t>(written.ptr - buffer));
  const size_t e = text.find('e');
  ShortestDecimal decimal;
  for (const char c : text.substr(0, e)) {
    if (c != '.') decimal.digits += c;
  }
  decimal.n = std::atoi(std::string(text.substr(e + 1)).c_str()) + 1;
  return decimal;
}

// ECMA-262 Number::toString steps for k digits and exponent n.
std::string lay_out(const ShortestDecimal& d) {
  const int k = static_cast<int>(d.digits.size());
  const int n = d.n;
  if (k <= n && n <= 21) return d.digits + std::string(static_cast<size_t>(n - k), '0');
  if (0 < n && n <= 21) return d.digits.substr(0, static_cast<size_t>(n)) + "." + d.digits.substr(static_cast<size_t>(n));
  if (-6 < n && n <= 0) return "0." + std::string(static_cast<size_t>(-n), '0') + d.digits;
  const int exponent = n - 1;
  const std::string sign = exponent < 0 ? "-" : "+";
  const std::string mantissa = k == 1 ? d.digits : d.digits.substr(0, 1) + "." + d.digits.substr(1);
  return mantissa + "e" + sign + std::to_string(std::abs(exponent));
}

}  // namespace

// ---------------------------------------------------------------------------
// Public interface

const char* json_error_name(JsonErrorCode code) {
  switch (code) {
    case JsonErrorCode::syntax: return "syntax";
    case JsonErrorCode::duplicate_key: return "duplicate_key";
    case JsonErrorCode::unsafe_integer: return "unsafe_integer";
    case JsonErrorCode::non_finite: return "non_finite";
    case JsonErrorCode::lone_surrogate: return "lone_surrogate";
    case JsonErrorCode::too_deep: return "too_deep";
  }
  return "unknown";
}

std::optional<Json> parse_strict(std::string_view text, JsonError* error, WideIntegers wide) {
  // The lexer takes a NUL for the end of input and would ignore what follows.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    report(error, make_error(JsonErrorCode::syntax, "a NUL byte (offset " + std::to_string(nul) +
                                                        ") is not allowed in JSON text; inside a string write "
                                                        "it as \\u0000"));
    return std::nullopt;
  }
  StrictBuilder builder(wide);
  const bool ok = Json::sax_parse(text.data(), text.data() + text.size(), &builder,
                                  Json::input_format_t::json, /*strict=*/true);
  if (!ok) {
    report(error, builder.error());
    return std::nullopt;
  }
  return std::move(builder.result());
}

bool validate_canonicalizable(const Json& value, JsonError* error) {
  std::optional<JsonError> problem = Validator().check(value, 0);
  if (problem) report(error, std::move(*problem));
  return !problem;
}

std::string canonicalize(const Json& value) {
  std::string out;
  canonicalize_into(value, out);
  return out;
}

void canonicalize_into(const Json& value, std::string& out) {
  JsonError error{JsonErrorCode::syntax, {}};
  if (!validate_canonicalizable(value, &error)) throw std::invalid_argument(error.message);
  append_canonical(value, out);
}

std::string format_es_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  if (value == 0) return "0";  // both +0 and -0
  const std::string sign = value < 0 ? "-" : "";
  return sign + lay_out(shortest_decimal(std::fabs(value)));
}

}  // namespace effectfence
