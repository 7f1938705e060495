#include "mcp/raw_json.h"

#include <cstdint>

namespace effectfence::mcp {
namespace {

// The binary subtype that marks a raw node ('R'); nothing else in the
// project makes binary values.
constexpr std::uint64_t kRawSubtype = 0x52;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_space(std::string_view text, size_t at) {
  while (at < text.size() && is_space(text[at])) ++at;
  return at;
}

// The end of the string whose opening quote is at text[at].
size_t skip_string(std::string_view text, size_t at) {
  for (++at; at < text.size(); ++at) {
    if (text[at] == '\\') ++at;
    else if (text[at] == '"') return at + 1;
  }
  return text.size();
}

// The end of the value that starts at text[at] (no space before it).
size_t skip_value(std::string_view text, size_t at) {
  if (at >= text.size()) return at;
  if (text[at] == '"') return skip_string(text, at);
  if (text[at] == '{' || text[at] == '[') {
    int depth = 0;
    for (; at < text.size(); ++at) {
      const char c = text[at];
      if (c == '"') {
        at = skip_string(text, at) - 1;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return at + 1;
      }
    }
    return text.size();
  }
  while (at < text.size() && !is_space(text[at]) && text[at] != ',' && text[at] != '}' && text[at] != ']') ++at;
  return at;
}

struct Member {
  size_t begin;        // of its key's opening quote
  size_t value_begin;
  size_t value_end;
  std::string key;     // unescaped
};

// The members of the object text holds, in order; empty if it is no object.
std::vector<Member> members_of(std::string_view text) {
  std::vector<Member> members;
  size_t at = skip_space(text, 0);
  if (at >= text.size() || text[at] != '{') return members;
  at = skip_space(text, at + 1);
  while (at < text.size() && text[at] == '"') {
    Member member;
    member.begin = at;
    const size_t key_end = skip_string(text, at);
    const std::string_view key = text.substr(at, key_end - at);
    // Only a key with an escape needs the parser to say what it names.
    member.key = key.find('\\') == std::string_view::npos ? std::string(key.substr(1, key.size() - 2))
                                                          : Json::parse(key).get<std::string>();
    at = skip_space(text, key_end);
    at = skip_space(text, at + 1);  // past ':'
    member.value_begin = at;
    member.value_end = skip_value(text, at);
    members.push_back(std::move(member));
    at = skip_space(text, members.back().value_end);
    if (at < text.size() && text[at] == ',') at = skip_space(text, at + 1);
  }
  return members;
}

const Member* find_member(const std::vector<Member>& members, std::string_view key) {
  for (const Member& member : members) {
    if (member.key == key) return &member;
  }
  return nullptr;
}

std::string_view trimmed(std::string_view text) {
  const size_t begin = skip_space(text, 0);
  size_t end = text.size();
  while (end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

void append_serialized(const Json& value, std::string& out) {
  switch (value.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, member] : value.items()) {
        if (!first) out += ',';
        first = false;
        out += Json(key).dump(-1, ' ', false, Json::error_handler_t::replace);
        out += ':';
        append_serialized(member, out);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& element : value) {
        if (!first) out += ',';
        first = false;
        append_serialized(element, out);
      }
      out += ']';
      return;
    }
    case Json::value_t::binary:
      if (is_raw_json(value)) {
        const auto& bytes = value.get_binary();
        out.append(bytes.begin(), bytes.end());
        return;
      }
      break;
    default:
      break;
  }
  out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool holds_raw(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
    case Json::value_t::array:
      for (const Json& element : value) {
        if (holds_raw(element)) return true;
      }
      return false;
    case Json::value_t::binary:
      return is_raw_json(value);
    default:
      return false;
  }
}

}  // namespace

Json raw_json(std::string_view text) {
  const std::string_view kept = trimmed(text);
  return Json::binary(Json::binary_t::container_type(kept.begin(), kept.end()), kRawSubtype);
}

bool is_raw_json(const Json& value) {
  return value.is_binary() && value.get_binary().has_subtype() && value.get_binary().subtype() == kRawSubtype;
}

std::string raw_json_text(const Json& value) {
  const auto& bytes = value.get_binary();
  return std::string(bytes.begin(), bytes.end());
}

std::optional<std::string_view> member_text(std::string_view text, std::string_view key) {
  const std::vector<Member> members = members_of(text);
  const Member* member = find_member(members, key);
  if (!member) return std::nullopt;
  return text.substr(member->value_begin, member->value_end - member->value_begin);
}

Json sent_member(std::string_view line, std::string_view key) {
  const auto text = member_text(line, key);
  return text ? raw_json(*text) : Json();
}

std::string with_member_text(std::string_view object_text, std::string_view key, std::string_view value_text) {
  const std::vector<Member> members = members_of(object_text);
  std::string out;
  if (const Member* member = find_member(members, key)) {
    out.append(object_text.substr(0, member->value_begin));
    out.append(value_text);
    out.append(object_text.substr(member->value_end));
    return out;
  }
  // Appended before the closing brace, after whatever space precedes it.
  const size_t close = object_text.rfind('}');
  out.append(object_text.substr(0, close));
  if (!members.empty()) out += ',';
  out += Json(std::string(key)).dump(-1, ' ', false, Json::error_handler_t::replace);
  out += ':';
  out.append(value_text);
  out.append(object_text.substr(close));
  return out;
}

std::string without_member_text(std::string_view object_text, std::string_view key) {
  const std::vector<Member> members = members_of(object_text);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].key != key) continue;
    // With the comma that joins it to its neighbour: the one after it, or
    // for the last member the one before it.
    size_t begin = members[i].begin;
    size_t end;
    if (i + 1 < members.size()) {
      end = members[i + 1].begin;
    } else {
      end = members[i].value_end;
      if (i > 0) begin = members[i - 1].value_end;
    }
    return std::string(object_text.substr(0, begin)) + std::string(object_text.substr(end));
  }
  return std::string(object_text);
}

std::vector<std::string_view> element_texts(std::string_view text) {
  std::vector<std::string_view> elements;
  size_t at = skip_space(text, 0);
  if (at >= text.size() || text[at] != '[') return elements;
  at = skip_space(text, at + 1);
  while (at < text.size() && text[at] != ']') {
    const size_t end = skip_value(text, at);
    elements.push_back(text.substr(at, end - at));
    at = skip_space(text, end);
    if (at < text.size() && text[at] == ',') at = skip_space(text, at + 1);
  }
  return elements;
}

bool is_object_text(std::string_view text) {
  const std::string_view kept = trimmed(text);
  return !kept.empty() && kept.front() == '{';
}

std::string serialize_with_raw(const Json& value) {
  if (!holds_raw(value)) return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  append_serialized(value, out);
  return out;
}

}  // namespace effectfence::mcp
