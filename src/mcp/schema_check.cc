#include "mcp/schema_check.h"

#include <cmath>

#include "core/utf8_length.h"

namespace effectfence::mcp {
namespace {

bool has_type(const Json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double d = value.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  return false;
}

std::string where(const std::string& path) { return path.empty() ? "/" : path; }

std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string check(const Json& schema, const Json& value, const std::string& path);

std::string check_type(const Json& type, const Json& value, const std::string& path) {
  if (type.is_string()) {
    if (has_type(value, type.get<std::string>())) return "";
    return where(path) + ": must be of type " + type.get<std::string>();
  }
  if (type.is_array()) {
    std::string names;
    for (const auto& t : type) {
      if (t.is_string() && has_type(value, t.get<std::string>())) return "";
      names += (names.empty() ? "" : " or ") + t.get<std::string>();
    }
    return where(path) + ": must be of type " + names;
  }
  return "";
}

std::string check_object(const Json& schema, const Json& value, const std::string& path) {
  const Json no_properties = Json::object();
  const Json& properties = schema.contains("properties") ? schema["properties"] : no_properties;
  if (auto required = schema.find("required"); required != schema.end()) {
    for (const auto& name : *required) {
      if (!value.contains(name.get<std::string>())) {
        return path + "/" + escape_pointer_token(name.get<std::string>()) + ": required field is missing";
      }
    }
  }
  const auto additional = schema.find("additionalProperties");
  for (const auto& [key, member] : value.items()) {
    const std::string member_path = path + "/" + escape_pointer_token(key);
    if (auto p = properties.find(key); p != properties.end()) {
      if (auto why = check(*p, member, member_path); !why.empty()) return why;
    } else if (additional != schema.end()) {
      if (additional->is_boolean() && !additional->get<bool>()) {
        return member_path + ": unknown field (allowed: " + [&] {
          std::string names;
          for (const auto& [name, unused] : properties.items()) names += (names.empty() ? "" : ", ") + name;
          return names;
        }() + ")";
      }
      if (additional->is_object()) {
        if (auto why = check(*additional, member, member_path); !why.empty()) return why;
      }
    }
  }
  return "";
}

std::string check(const Json& schema, const Json& value, const std::string& path) {
  if (!schema.is_object()) return "";
  if (auto type = schema.find("type"); type != schema.end()) {
    if (auto why = check_type(*type, value, path); !why.empty()) return why;
  }
  if (auto c = schema.find("const"); c != schema.end() && *c != value) {
    return where(path) + ": must be " + c->dump();
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    bool listed = false;
    for (const auto& option : *e) listed = listed || option == value;
    if (!listed) return where(path) + ": must be one of " + e->dump();
  }
  const auto min_length = schema.find("minLength");
  const auto max_length = schema.find("maxLength");
  if (value.is_string() && (min_length != schema.end() || max_length != schema.end())) {
    const size_t length = utf8_length(value.get_ref<const std::string&>());  // counted once, for both
    if (min_length != schema.end() && length < min_length->get<size_t>()) {
      return where(path) + (min_length->get<size_t>() == 1
                                ? ": must not be empty"
                                : ": must be at least " + min_length->dump() + " characters");
    }
    if (max_length != schema.end() && length > max_length->get<size_t>()) {
      return where(path) + ": must be at most " + max_length->dump() + " characters";
    }
  }
  // As doubles: exact for every number a message may hold (integers beyond
  // ±2^53 are refused when it is read).
  if (auto m = schema.find("minimum"); m != schema.end() && value.is_number()) {
    if (value.get<double>() < m->get<double>()) return where(path) + ": must be >= " + m->dump();
  }
  if (auto m = schema.find("maximum"); m != schema.end() && value.is_number()) {
    if (value.get<double>() > m->get<double>()) return where(path) + ": must be <= " + m->dump();
  }
  if (value.is_object()) {
    if (auto why = check_object(schema, value, path); !why.empty()) return why;
  }
  if (auto items = schema.find("items"); items != schema.end() && value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      if (auto why = check(*items, value[i], path + "/" + std::to_string(i)); !why.empty()) return why;
    }
  }
  if (auto any = schema.find("anyOf"); any != schema.end()) {
    std::string first;
    for (const auto& option : *any) {
      auto why = check(option, value, path);
      if (why.empty()) return "";
      if (first.empty()) first = why;
    }
    return first;
  }
  if (auto one = schema.find("oneOf"); one != schema.end()) {
    size_t matches = 0;
    std::string first;
    for (const auto& option : *one) {
      auto why = check(option, value, path);
      if (why.empty()) ++matches;
      else if (first.empty()) first = why;
    }
    if (matches == 1) return "";
    if (matches > 1) return where(path) + ": matches more than one of oneOf";
    return first;
  }
  return "";
}

}  // namespace

std::string schema_violation(const Json& schema, const Json& value) { return check(schema, value, ""); }

}  // namespace effectfence::mcp
