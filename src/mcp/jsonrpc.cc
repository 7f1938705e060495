#include "mcp/jsonrpc.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>

#include "mcp/plain_json.h"
#include "mcp/raw_json.h"

namespace effectfence::mcp::jsonrpc {
namespace {

// Watches only the top level of a document for its "id": no tree is built,
// so nesting depth and size cost nothing, and input that stops being JSON
// part-way still yields what came before.
class IdFinder {
 public:
  using json = Json;

  Json id() const { return ambiguous_ || !found_ ? Json() : id_; }
  // The id found cannot be told (it held a lone surrogate): id() is null,
  // and the text still has an id.
  void lose_id() { ambiguous_ = true; }
  // True iff a top-level "result" or "error" key was read, and no "method":
  // the text says it is a response.
  bool says_response() const { return saw_outcome_ && !saw_method_; }
  // True iff a whole message from the other side can be meant to answer
  // ours: it has a "result" or "error", or nothing but "jsonrpc" and "id"
  // (anything else, "params" say, may be a broken request of its own).
  bool may_answer() const { return saw_outcome_ || (!saw_method_ && !saw_other_); }
  // True iff the text has a top-level "method" and no "id": a notification,
  // which is never answered, not even when it cannot be read.
  bool says_notification() const { return saw_method_ && !found_; }
  // True iff the one top-level "id" holds a number no id may be (beyond
  // +/-2^53, or a fraction): the message is well-formed JSON with a bad id.
  bool id_out_of_range() const { return bad_number_id_ && !duplicate_id_; }

  bool null() { return scalar(Json()); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(json::number_integer_t v) { return number(Json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return number(Json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return number(Json(v)); }
  bool string(json::string_t& v) { return scalar(Json(v)); }
  bool binary(json::binary_t&) { return scalar(Json()); }
  bool start_object(std::size_t) { return open(); }
  bool start_array(std::size_t) {
    if (depth_ == 0) return false;  // a batch: no single id to find
    return open();
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      at_id_ = (k == "id");
      if (at_id_ && found_) ambiguous_ = duplicate_id_ = true;
      saw_outcome_ = saw_outcome_ || k == "result" || k == "error";
      saw_method_ = saw_method_ || k == "method";
      saw_other_ = saw_other_ || !(k == "jsonrpc" || k == "id" || k == "result" || k == "error" || k == "method");
    }
    return !ambiguous_;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  bool number(Json value) {
    if (depth_ == 1 && at_id_ && !is_valid_id(value)) bad_number_id_ = true;
    return scalar(std::move(value));
  }
  bool scalar(Json value) {
    if (depth_ == 1 && at_id_) take(is_valid_id(value) ? std::move(value) : Json());
    return !ambiguous_;
  }
  bool open() {
    if (depth_ == 1 && at_id_) take(Json());  // an object or array is no id
    ++depth_;
    return !ambiguous_;
  }
  bool close() {
    --depth_;
    return true;
  }
  void take(Json value) {
    found_ = true;
    id_ = std::move(value);
    if (id_.is_null()) ambiguous_ = true;
  }

  int depth_ = 0;
  bool at_id_ = false;
  bool found_ = false;
  bool ambiguous_ = false;
  bool saw_outcome_ = false;
  bool saw_method_ = false;
  bool saw_other_ = false;
  bool bad_number_id_ = false;
  bool duplicate_id_ = false;
  Json id_;
};

bool is_hex4(std::string_view s, size_t at) {
  if (at + 4 > s.size()) return false;
  for (size_t i = at; i < at + 4; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

uint32_t hex4(std::string_view s, size_t at) {
  return static_cast<uint32_t>(std::stoul(std::string(s.substr(at, 4)), nullptr, 16));
}

// The text with every \u escape of a lone UTF-16 surrogate made
// \u<stand_in> (FFFD unless told). The SAX parser stops at one, and
// JSON.stringify writes them (a string cut mid-emoji), often before a
// trailing "id": refused as ambiguous, such a message must still be
// answered to the request that sent it.
std::string without_lone_surrogates(std::string_view text, const char* stand_in = "FFFD") {
  std::string out(text);
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] != '\\') continue;
    if (out[i + 1] != 'u' || !is_hex4(out, i + 2)) {
      ++i;  // another escape: skip its second character
      continue;
    }
    const uint32_t unit = hex4(out, i + 2);
    const bool high = unit >= 0xD800 && unit <= 0xDBFF;
    const bool paired = high && i + 12 <= out.size() && out.compare(i + 6, 2, "\\u") == 0 &&
                        is_hex4(out, i + 8) && hex4(out, i + 8) >= 0xDC00 && hex4(out, i + 8) <= 0xDFFF;
    if (paired) {
      i += 11;
    } else {
      if (unit >= 0xD800 && unit <= 0xDFFF) out.replace(i + 2, 4, stand_in);
      i += 5;
    }
  }
  return out;
}

// The text with every number a double cannot hold (1e400, or 400 digits)
// made 0.5. The SAX parser stops at one, so an id after it was never read
// and a request went unanswered. 0.5 is no id: an id that overflowed stays
// unreadable, as any fraction does.
std::string with_finite_numbers(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c != '-' && !std::isdigit(static_cast<unsigned char>(c))) {
      in_string = c == '"';
      out += c;
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                 text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
      ++end;
    }
    const std::string number(text.substr(i, end - i));
    out += std::isinf(std::strtod(number.c_str(), nullptr)) ? std::string("0.5") : number;
    i = end;
  }
  return out;
}

}  // namespace

bool is_valid_id(const Json& id) {
  if (id.is_string()) return true;
  if (id.is_number_unsigned()) return id.get<uint64_t>() <= static_cast<uint64_t>(kMaxSafeInteger);
  if (id.is_number_integer()) {
    const int64_t v = id.get<int64_t>();
    return v <= kMaxSafeInteger && v >= -kMaxSafeInteger;
  }
  return false;
}

namespace {

// Another stand-in for a lone surrogate: what reads differently with it
// than with U+FFFD held one, and cannot be told (an id "\ud800" is not "\ufffd").
constexpr const char* kOtherStandIn = "FFFE";

// The params' "requestId" of a notification document, or null.
Json request_id_in(const Json& document) {
  if (!document.is_object()) return Json();
  const auto params = document.find("params");
  return params != document.end() && params->is_object() ? params->value("requestId", Json()) : Json();
}

IdFinder top_level_of(std::string_view raw) {
  const std::string finite = with_finite_numbers(raw);
  const std::string_view text = finite;
  const std::string readable = without_lone_surrogates(text);
  IdFinder finder;
  Json::sax_parse(readable.begin(), readable.end(), &finder);
  if (readable != text) {
    const std::string other = without_lone_surrogates(text, kOtherStandIn);
    IdFinder check;
    Json::sax_parse(other.begin(), other.end(), &check);
    if (check.id() != finder.id()) finder.lose_id();
  }
  return finder;
}

}  // namespace

Json recover_id(std::string_view text) { return top_level_of(text).id(); }

std::optional<Json> oversized_response_id(std::string_view prefix, std::string_view tail) {
  const IdFinder finder = top_level_of(prefix);
  if (!finder.says_response()) return std::nullopt;
  Json id = finder.id();
  return id.is_null() ? trailing_id(tail) : id;
}

Json trailing_id(std::string_view tail) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  size_t end = tail.size();
  while (end > 0 && is_space(tail[end - 1])) --end;
  if (end == 0 || tail[end - 1] != '}') return Json();
  --end;
  while (end > 0 && is_space(tail[end - 1])) --end;
  // The value: an integer, or a string holding no quote or backslash.
  size_t begin = end;
  if (begin > 0 && tail[begin - 1] == '"') {
    --begin;
    while (begin > 0 && tail[begin - 1] != '"' && tail[begin - 1] != '\\') --begin;
    if (begin == 0 || tail[begin - 1] != '"') return Json();
    --begin;
  } else {
    while (begin > 0 && (std::isdigit(static_cast<unsigned char>(tail[begin - 1])) || tail[begin - 1] == '-')) --begin;
    if (begin == end) return Json();
  }
  const std::string_view value = tail.substr(begin, end - begin);
  size_t at = begin;
  while (at > 0 && is_space(tail[at - 1])) --at;
  if (at == 0 || tail[at - 1] != ':') return Json();
  --at;
  while (at > 0 && is_space(tail[at - 1])) --at;
  constexpr std::string_view kKey = "\"id\"";
  if (at < kKey.size() || tail.substr(at - kKey.size(), kKey.size()) != kKey) return Json();
  at -= kKey.size();
  while (at > 0 && is_space(tail[at - 1])) --at;
  if (at == 0 || (tail[at - 1] != ',' && tail[at - 1] != '{')) return Json();  // a member of the object the line ends
  JsonError error;
  auto id = parse_strict(value, &error);
  return id && is_valid_id(*id) ? *id : Json();
}

Json recover_response_id(std::string_view text) {
  const IdFinder finder = top_level_of(text);
  return finder.says_response() ? finder.id() : Json();
}

Json recover_answer_id(std::string_view text) {
  const IdFinder finder = top_level_of(text);
  return finder.may_answer() ? finder.id() : Json();
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Messages are mostly ASCII: eight bytes at a time while no high bit is set.
    if (i + 8 <= n) {
      uint64_t word = 0;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080u) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

Message classify(std::string_view line, WideIntegers wide) {
  // Nearly every line is plain JSON, read quickly; anything else, and every
  // line to refuse, is read by parse_strict, which says what is wrong.
  if (std::optional<Json> plain = parse_plain(line)) return classify_document(std::move(*plain));
  JsonError error{JsonErrorCode::syntax, ""};
  std::optional<Json> document = parse_strict(line, &error, wide);
  if (document) return classify_document(std::move(*document));

  // The parser stops at the first thing wrong: a lone surrogate, a duplicate
  // key or a huge number may come before what makes the line no JSON at
  // all, which is a parse error still (never read as an ambiguous
  // notification and left unanswered).
  if (error.code != JsonErrorCode::syntax &&
      !Json::accept(without_lone_surrogates(with_finite_numbers(line)))) {
    error = JsonError{JsonErrorCode::syntax, "not valid JSON (besides: " + error.message + ")"};
  }
  if (error.code == JsonErrorCode::syntax) {
    if (auto bad = first_invalid_utf8(line)) {
      return Invalid{Json(), kParseError,
                     "parse error: the message is not valid UTF-8 (bad byte at offset " + std::to_string(*bad) + ")"};
    }
    return Invalid{Json(), kParseError, "parse error: " + error.message};
  }
  // Well-formed but ambiguous (duplicate keys, integers a double cannot
  // keep apart, ...) or beyond what is accepted (nesting, infinity):
  // refused, and told to the request that sent it.
  const bool ambiguous = error.code != JsonErrorCode::too_deep && error.code != JsonErrorCode::non_finite;
  std::string message = std::string(ambiguous ? "ambiguous JSON refused: " : "JSON refused: ") + error.message +
                        " (" + json_error_name(error.code) + ")";
  const IdFinder finder = top_level_of(line);
  if (finder.says_notification()) {
    // A lone surrogate only spoils a string: read with U+FFFD in its place,
    // a cancellation still stops the call it names.
    if (error.code == JsonErrorCode::lone_surrogate) {
      JsonError again{JsonErrorCode::syntax, ""};
      if (std::optional<Json> readable = parse_strict(without_lone_surrogates(line), &again, wide)) {
        Message note = classify_document(std::move(*readable));
        // Unless the call it names held the surrogate: that one cannot be told.
        const std::optional<Json> other = parse_strict(without_lone_surrogates(line, kOtherStandIn), &again, wide);
        const auto* read = std::get_if<Notification>(&note);
        if (read && other && read->params.value("requestId", Json()) == request_id_in(*other)) return note;
      }
    }
    return Invalid{Json(), kParseError, std::move(message) + " in a notification", false};
  }
  if (finder.says_response()) {
    // Never answered: an error under its id would reach the client as an
    // answer to a request of its own.
    return Invalid{finder.id(), kParseError, std::move(message) + " in a response", false, true};
  }
  if (finder.id_out_of_range()) {
    // Valid JSON, read whole: what is wrong is the id, as classify_document says.
    return Invalid{Json(), kInvalidRequest,
                   "invalid request: \"id\" must be a string or an integer within +/-2^53 (" + error.message + ")"};
  }
  Json id = finder.id();
  if (id.is_null()) return Invalid{Json(), kParseError, std::move(message)};
  return Invalid{std::move(id), kInvalidParams, std::move(message)};
}

Message classify_document(Json document) {
  if (document.is_array()) {
    return Invalid{Json(), kInvalidRequest,
                   "invalid request: batches (JSON arrays) are not supported; send one JSON-RPC message per line"};
  }
  if (!document.is_object()) {
    return Invalid{Json(), kInvalidRequest, "invalid request: a JSON-RPC message must be a JSON object"};
  }
  const auto id_it = document.find("id");
  const bool has_id = id_it != document.end();
  const auto method_it = document.find("method");
  const bool is_response = method_it == document.end() && has_id &&
                           (document.contains("result") != document.contains("error"));

  Json id;
  if (has_id && !(is_response && id_it->is_null())) {
    if (!is_valid_id(*id_it)) {
      return Invalid{Json(), kInvalidRequest, "invalid request: \"id\" must be a string or an integer"};
    }
    id = *id_it;
  }
  const auto version = document.find("jsonrpc");
  if (version == document.end() || *version != "2.0") {
    if (is_response) return Invalid{id, kInvalidRequest, "invalid response: \"jsonrpc\" must be \"2.0\"", false, true};
    return Invalid{id, kInvalidRequest, "invalid request: \"jsonrpc\" must be \"2.0\""};
  }

  if (is_response) {
    Response response{id, std::nullopt, std::nullopt};
    if (auto r = document.find("result"); r != document.end()) response.result = std::move(*r);
    if (auto e = document.find("error"); e != document.end()) response.error = std::move(*e);
    return response;
  }
  if (method_it == document.end()) {
    if (document.contains("result") || document.contains("error")) {
      // Answering it would send the peer a response to its own request id.
      return Invalid{id, kInvalidRequest,
                     "invalid response: it must hold exactly one of \"result\" and \"error\", and an id", false,
                     true};
    }
    return Invalid{id, kInvalidRequest, "invalid request: no \"method\" (and not a response either)"};
  }
  if (!method_it->is_string()) {
    return Invalid{id, kInvalidRequest, "invalid request: \"method\" must be a string"};
  }
  if (document.contains("result") || document.contains("error")) {
    // Neither a request nor a response: served, it could stand in for the
    // peer's answer to a request of ours with the same id, which would wait.
    return Invalid{id, kInvalidRequest,
                   "invalid message: it has a \"method\" and also a \"result\" or \"error\" (a request has no "
                   "outcome, a response no method)"};
  }
  Json params = Json::object();
  if (auto p = document.find("params"); p != document.end() && !p->is_null()) {
    // A notification is never answered, not even with an error: its
    // positional or malformed params are dropped instead.
    if (!p->is_object() && has_id) {
      return Invalid{id, kInvalidParams, "invalid params: \"params\" must be an object"};
    }
    if (p->is_object()) params = std::move(*p);  // the document is ours: its params are not copied
  }
  std::string method = std::move(method_it->get_ref<std::string&>());
  if (has_id) return Request{id, std::move(method), std::move(params)};
  return Notification{std::move(method), std::move(params)};
}

Invalid oversized(std::string_view prefix, std::string_view tail, size_t limit) {
  const IdFinder finder = top_level_of(prefix);
  Json id = finder.id();
  if (id.is_null()) id = trailing_id(tail);
  std::string message =
      "message too large: lines are limited to " + std::to_string(limit) + " bytes; the message was skipped";
  // A method and no id before its params nor at its end: a notification
  // (SDKs write a request's id ahead of its params), never answered.
  if (id.is_null() && finder.says_notification()) return Invalid{Json(), kInvalidRequest, message + " (a notification)", false};
  return Invalid{std::move(id), kInvalidRequest, std::move(message)};
}

Json result_response(const Json& id, Json result) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json error_response(const Json& id, int code, std::string message, Json data) {
  Json error = {{"code", code}, {"message", std::move(message)}};
  if (!data.is_null()) error["data"] = std::move(data);
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}};
}

Json request(const Json& id, std::string method, Json params) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", std::move(method)}, {"params", std::move(params)}};
}

Json notification(std::string method, Json params) {
  Json message = {{"jsonrpc", "2.0"}, {"method", std::move(method)}};
  if (!params.is_null()) message["params"] = std::move(params);
  return message;
}

std::string serialize(const Json& message) {
  return serialize_with_raw(message);  // relayed text (raw_json) goes out as it came
}

}  // namespace effectfence::mcp::jsonrpc
