#include "mcp/schema_check.h"

#include <cmath>
#include <map>
#include <optional>
#include <vector>

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
    // Compared as numbers: a bound that is no count (1e30, -1, 2.5) must
    // not be converted to size_t (out of range, that is undefined).
    if (min_length != schema.end() && static_cast<double>(length) < min_length->get<double>()) {
      return where(path) + (*min_length == 1
                                ? ": must not be empty"
                                : ": must be at least " + min_length->dump() + " characters");
    }
    if (max_length != schema.end() && static_cast<double>(length) > max_length->get<double>()) {
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

// ---- the compiled form -------------------------------------------------------

// One schema object, its keywords read out; the checks and messages are
// those of check() above, in the same order.
struct CompiledSchema::Node {
  bool is_schema = false;  // false: not an object, which accepts everything
  bool has_type = false;
  unsigned types = 0;      // kTypeBits of the names listed
  std::string type_names;  // "string or null"
  const Json* constant = nullptr;
  std::string constant_text;
  const Json* options = nullptr;  // enum
  std::string options_text;
  std::optional<size_t> min_length, max_length;
  std::string min_length_text, max_length_text;
  std::optional<double> minimum, maximum;
  std::string minimum_text, maximum_text;
  std::vector<std::string> required;
  std::map<std::string, std::unique_ptr<Node>, std::less<>> properties;
  std::string allowed;  // the properties' names, for an unknown field's message
  enum class Additional { unchecked, forbidden, schema } additional = Additional::unchecked;
  std::unique_ptr<Node> additional_schema;
  std::unique_ptr<Node> items;
  bool has_any_of = false;
  std::vector<std::unique_ptr<Node>> any_of;
  bool has_one_of = false;
  std::vector<std::unique_ptr<Node>> one_of;
};

namespace {

using Node = CompiledSchema::Node;

enum TypeBit : unsigned {
  kObject = 1, kArray = 2, kString = 4, kBoolean = 8, kNull = 16, kNumber = 32, kInteger = 64,
};

unsigned type_bit(const std::string& name) {
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "boolean") return kBoolean;
  if (name == "null") return kNull;
  if (name == "number") return kNumber;
  if (name == "integer") return kInteger;
  return 0;  // a name JSON Schema does not have: nothing is of that type
}

bool has_any_type(unsigned types, const Json& value) {
  if ((types & kObject) && value.is_object()) return true;
  if ((types & kArray) && value.is_array()) return true;
  if ((types & kString) && value.is_string()) return true;
  if ((types & kBoolean) && value.is_boolean()) return true;
  if ((types & kNull) && value.is_null()) return true;
  if ((types & kNumber) && value.is_number()) return true;
  if (types & kInteger) return has_type(value, "integer");
  return false;
}

bool is_count(const Json& j) { return j.is_number_integer() && (j.is_number_unsigned() || j.get<int64_t>() >= 0); }

// Fills node from schema; false when a keyword has a shape check() would
// read differently from the subset (the whole schema is then left to it).
bool compile(const Json& schema, Node& node);

bool compile_child(const Json& schema, std::unique_ptr<Node>& child) {
  child = std::make_unique<Node>();
  return compile(schema, *child);
}

bool compile_list(const Json& list, std::vector<std::unique_ptr<Node>>& nodes) {
  if (!list.is_array()) return false;
  for (const Json& option : list) {
    nodes.emplace_back();
    if (!compile_child(option, nodes.back())) return false;
  }
  return true;
}

bool compile_type(const Json& type, Node& node) {
  if (type.is_string()) {
    node.has_type = true;
    node.types = type_bit(type.get<std::string>());
    node.type_names = type.get<std::string>();
  } else if (type.is_array()) {
    node.has_type = true;
    for (const Json& name : type) {
      if (!name.is_string()) return false;
      node.types |= type_bit(name.get<std::string>());
      node.type_names += (node.type_names.empty() ? "" : " or ") + name.get<std::string>();
    }
  }
  return true;  // any other "type" is no rule
}

bool compile_object_keywords(const Json& schema, Node& node) {
  if (auto properties = schema.find("properties"); properties != schema.end()) {
    if (!properties->is_object()) return false;
    for (const auto& [name, property] : properties->items()) {
      if (!compile_child(property, node.properties[name])) return false;
      node.allowed += (node.allowed.empty() ? "" : ", ") + name;
    }
  }
  if (auto required = schema.find("required"); required != schema.end()) {
    if (!required->is_array()) return false;
    for (const Json& name : *required) {
      if (!name.is_string()) return false;
      node.required.push_back(name.get<std::string>());
    }
  }
  if (auto additional = schema.find("additionalProperties"); additional != schema.end()) {
    if (additional->is_boolean() && !additional->get<bool>()) {
      node.additional = Node::Additional::forbidden;
    } else if (additional->is_object()) {
      node.additional = Node::Additional::schema;
      if (!compile_child(*additional, node.additional_schema)) return false;
    }
  }
  return true;
}

bool compile(const Json& schema, Node& node) {
  if (!schema.is_object()) return true;
  node.is_schema = true;
  if (auto type = schema.find("type"); type != schema.end() && !compile_type(*type, node)) return false;
  if (auto c = schema.find("const"); c != schema.end()) {
    node.constant = &*c;
    node.constant_text = c->dump();
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array()) return false;
    node.options = &*e;
    node.options_text = e->dump();
  }
  if (auto m = schema.find("minLength"); m != schema.end()) {
    if (!is_count(*m)) return false;
    node.min_length = m->get<size_t>();
    node.min_length_text = m->dump();
  }
  if (auto m = schema.find("maxLength"); m != schema.end()) {
    if (!is_count(*m)) return false;
    node.max_length = m->get<size_t>();
    node.max_length_text = m->dump();
  }
  if (auto m = schema.find("minimum"); m != schema.end()) {
    if (!m->is_number()) return false;
    node.minimum = m->get<double>();
    node.minimum_text = m->dump();
  }
  if (auto m = schema.find("maximum"); m != schema.end()) {
    if (!m->is_number()) return false;
    node.maximum = m->get<double>();
    node.maximum_text = m->dump();
  }
  if (!compile_object_keywords(schema, node)) return false;
  if (auto items = schema.find("items"); items != schema.end() && !compile_child(*items, node.items)) return false;
  if (auto any = schema.find("anyOf"); any != schema.end()) {
    node.has_any_of = true;
    if (!compile_list(*any, node.any_of)) return false;
  }
  if (auto one = schema.find("oneOf"); one != schema.end()) {
    node.has_one_of = true;
    if (!compile_list(*one, node.one_of)) return false;
  }
  return true;
}

// Where a value sits, as a chain of steps up to the document: spelled out
// (as a JSON Pointer) only for a message.
struct Step {
  const Step* parent;
  const std::string* key;  // a member; null for an array element
  size_t index;
};

std::string pointer(const Step* step) {
  if (step == nullptr) return "";
  return pointer(step->parent) + "/" + (step->key ? escape_pointer_token(*step->key) : std::to_string(step->index));
}

std::string where(const Step* step) { return step == nullptr ? "/" : pointer(step); }

std::string check(const Node& node, const Json& value, const Step* at);

std::string check_object(const Node& node, const Json& value, const Step* at) {
  for (const std::string& name : node.required) {
    if (!value.contains(name)) return pointer(at) + "/" + escape_pointer_token(name) + ": required field is missing";
  }
  for (auto member = value.begin(); member != value.end(); ++member) {
    const Step member_at{at, &member.key(), 0};
    if (auto p = node.properties.find(member.key()); p != node.properties.end()) {
      if (auto why = check(*p->second, member.value(), &member_at); !why.empty()) return why;
    } else if (node.additional == Node::Additional::forbidden) {
      return pointer(&member_at) + ": unknown field (allowed: " + node.allowed + ")";
    } else if (node.additional == Node::Additional::schema) {
      if (auto why = check(*node.additional_schema, member.value(), &member_at); !why.empty()) return why;
    }
  }
  return "";
}

std::string check(const Node& node, const Json& value, const Step* at) {
  if (!node.is_schema) return "";
  if (node.has_type && !has_any_type(node.types, value)) return where(at) + ": must be of type " + node.type_names;
  if (node.constant && *node.constant != value) return where(at) + ": must be " + node.constant_text;
  if (node.options) {
    bool listed = false;
    for (const auto& option : *node.options) listed = listed || option == value;
    if (!listed) return where(at) + ": must be one of " + node.options_text;
  }
  if (value.is_string() && (node.min_length || node.max_length)) {
    const size_t length = utf8_length(value.get_ref<const std::string&>());
    if (node.min_length && length < *node.min_length) {
      return where(at) + (*node.min_length == 1 ? ": must not be empty"
                                                : ": must be at least " + node.min_length_text + " characters");
    }
    if (node.max_length && length > *node.max_length) {
      return where(at) + ": must be at most " + node.max_length_text + " characters";
    }
  }
  if (node.minimum && value.is_number() && value.get<double>() < *node.minimum) {
    return where(at) + ": must be >= " + node.minimum_text;
  }
  if (node.maximum && value.is_number() && value.get<double>() > *node.maximum) {
    return where(at) + ": must be <= " + node.maximum_text;
  }
  if (value.is_object()) {
    if (auto why = check_object(node, value, at); !why.empty()) return why;
  }
  if (node.items && value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const Step element_at{at, nullptr, i};
      if (auto why = check(*node.items, value[i], &element_at); !why.empty()) return why;
    }
  }
  if (node.has_any_of) {
    std::string first;
    for (const auto& option : node.any_of) {
      auto why = check(*option, value, at);
      if (why.empty()) return "";
      if (first.empty()) first = why;
    }
    return first;
  }
  if (node.has_one_of) {
    size_t matches = 0;
    std::string first;
    for (const auto& option : node.one_of) {
      auto why = check(*option, value, at);
      if (why.empty()) ++matches;
      else if (first.empty()) first = why;
    }
    if (matches == 1) return "";
    if (matches > 1) return where(at) + ": matches more than one of oneOf";
    return first;
  }
  return "";
}

}  // namespace

CompiledSchema::CompiledSchema(Json schema) : schema_(std::make_unique<const Json>(std::move(schema))) {
  auto root = std::make_unique<Node>();
  if (compile(*schema_, *root)) root_ = std::move(root);
}

CompiledSchema::~CompiledSchema() = default;
CompiledSchema::CompiledSchema(CompiledSchema&&) noexcept = default;
CompiledSchema& CompiledSchema::operator=(CompiledSchema&&) noexcept = default;

std::string CompiledSchema::violation(const Json& value) const {
  if (!root_) return schema_violation(*schema_, value);
  return check(*root_, value, nullptr);
}

}  // namespace effectfence::mcp
