#include "scan/declarations.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "scan/structure.h"

namespace effectfence::scan {
namespace {

std::string lowered(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

size_t skip_space(const std::string& code, size_t k, size_t stop) {
  while (k < stop && std::isspace(static_cast<unsigned char>(code[k]))) ++k;
  return k;
}

// The literal that is the whole value of [begin, end), or nullptr.
const StringLiteral* sole_literal(const MaskedSource& source, size_t begin, size_t end) {
  const size_t first = skip_space(source.code, begin, end);
  const StringLiteral* literal = source.string_at(first);
  if (!literal) return nullptr;
  return skip_space(source.code, literal->end, end) == end ? literal : nullptr;
}

const BracketEntry* entry_named(const std::vector<BracketEntry>& entries, const std::string& key) {
  for (const auto& entry : entries) {
    if (lowered(entry.key) == key) return &entry;
  }
  return nullptr;
}

// The description inside a declaration's bracketed list: a description
// entry; else one in an object given as a positional argument; else a
// WithDescription(...) argument; else the second positional literal.
std::string description_in(const MaskedSource& source, const std::vector<BracketEntry>& entries) {
  if (const BracketEntry* d = entry_named(entries, "description")) {
    return literal_text(source, d->value_begin, d->value_end);
  }
  int positional = 0;
  for (const auto& entry : entries) {
    if (!entry.key.empty()) continue;
    ++positional;
    const size_t first = skip_space(source.code, entry.value_begin, entry.value_end);
    if (first < entry.value_end && source.code[first] == '{') {
      const auto inner = bracket_entries(source, first, matching_close(source, first));
      if (const BracketEntry* d = entry_named(inner, "description")) {
        return literal_text(source, d->value_begin, d->value_end);
      }
    }
    const std::string_view code(source.code.data() + entry.value_begin, entry.value_end - entry.value_begin);
    if (code.find("Description(") != std::string_view::npos) {
      return literal_text(source, entry.value_begin, entry.value_end);
    }
    if (positional == 2 && sole_literal(source, entry.value_begin, entry.value_end)) {
      return literal_text(source, entry.value_begin, entry.value_end);
    }
  }
  return "";
}

class Finder {
 public:
  Finder(const SourceFile& file, size_t index) : file_(file), src_(file.masked), code_(file.masked.code), index_(index) {}

  std::vector<ToolDeclaration> run() {
    const auto uses = identifier_uses(code_);
    for (size_t i = 0; i < uses.size(); ++i) {
      const IdentifierUse& use = uses[i];
      const std::string_view name = use.name;
      const bool called = use.open != std::string::npos;
      const bool braced = use.next < code_.size() && code_[use.next] == '{';
      switch (file_.language) {
        case Language::javascript:
          if (called && use.member && (name == "tool" || name == "registerTool" || name == "addTool")) {
            call(use, std::string(name) + "(...)");
          }
          break;
        case Language::python:
          if (name == "tool" && use.decorator) python_decorator(uses, i);
          if (name == "Tool" && called) named_list(use.open, "Tool(...)", use.chain_start);
          break;
        case Language::go:
          if (name == "NewTool" && called) call(use, "NewTool(...)");
          if (name == "Tool" && braced) named_list(use.next, "Tool{...}", use.chain_start);
          break;
        case Language::rust:
          if (name == "tool" && rust_attribute_at(use.at)) rust_attribute(uses, i);
          if (name == "new" && called && i > 0 && uses[i - 1].name == "Tool" &&
              code_.compare(skip_back_space(code_, use.at) - 2, 2, "::") == 0) {
            call(use, "Tool::new(...)");
          }
          if (name == "Tool" && braced) named_list(use.next, "Tool {...}", use.chain_start);
          break;
      }
    }
    if (file_.language == Language::javascript) object_literals();
    std::sort(found_.begin(), found_.end(),
              [](const ToolDeclaration& a, const ToolDeclaration& b) { return a.begin < b.begin; });
    return found_;
  }

 private:
  void add(std::string name, size_t name_at, std::string description, std::string form, size_t begin, size_t end) {
    if (name.empty() || !seen_names_at_.insert(name_at).second) return;
    end = std::min(end, code_.size());  // an unclosed bracket closes at the end of the text, not past it
    found_.push_back(ToolDeclaration{std::move(name), std::move(description), std::move(form), index_,
                                     src_.line_of(name_at), begin, end, written_hints(src_, begin, end)});
  }

  // A decorated function's tool name: name="..." in the decorator, else
  // the function's own; with where it is written.
  std::pair<std::string, size_t> name_of(const IdentifierUse& function, const std::vector<BracketEntry>& entries) const {
    if (const BracketEntry* n = entry_named(entries, "name")) {
      if (const StringLiteral* literal = sole_literal(src_, n->value_begin, n->value_end)) return {literal->text, literal->begin};
    }
    return {std::string(function.name), function.at};
  }

  // NAME("tool-name", ...): the first argument is the name.
  void call(const IdentifierUse& use, const std::string& form) {
    const size_t close = matching_close(src_, use.open);
    const auto entries = bracket_entries(src_, use.open, close);
    if (entries.empty() || !entries[0].key.empty()) return;
    const StringLiteral* name = sole_literal(src_, entries[0].value_begin, entries[0].value_end);
    if (!name) return;
    add(name->text, name->begin, description_in(src_, entries), form, use.chain_start, close + 1);
  }

  // The NAME of the first `keyword NAME` (def, fn) at or after from, past
  // use i; nullptr when none. The keyword is the use just before it.
  static const IdentifierUse* function_after(const std::vector<IdentifierUse>& uses, size_t i, size_t from,
                                             std::string_view keyword) {
    for (size_t k = i + 1; k + 1 < uses.size(); ++k) {
      if (uses[k].at >= from && uses[k].name == keyword) return &uses[k + 1];
    }
    return nullptr;
  }

  // A bracketed list with a string `name` entry; returns true iff it was one.
  bool named_list(size_t open, const std::string& form, size_t begin) {
    const size_t close = matching_close(src_, open);
    const auto entries = bracket_entries(src_, open, close);
    const BracketEntry* name_entry = entry_named(entries, "name");
    if (!name_entry) return false;
    const StringLiteral* name = sole_literal(src_, name_entry->value_begin, name_entry->value_end);
    if (!name) return false;
    add(name->text, name->begin, description_in(src_, entries), form, begin, close + 1);
    return true;
  }

  // { name: "n", description: ..., inputSchema: ... }: a tool, unlike any
  // other object with a name, has a schema for its input.
  void object_literals() {
    for (size_t open = code_.find('{'); open != std::string::npos; open = code_.find('{', open + 1)) {
      const size_t close = matching_close(src_, open);
      const auto entries = bracket_entries(src_, open, close);
      const bool has_schema = entry_named(entries, "inputschema") || entry_named(entries, "input_schema") ||
                              entry_named(entries, "parameters");
      if (has_schema && entry_named(entries, "description")) named_list(open, "object literal", open);
    }
  }

  // @something.tool / @tool(...) above a def: the name is name= or the
  // function's; the description is description= or the docstring.
  void python_decorator(const std::vector<IdentifierUse>& uses, size_t i) {
    const IdentifierUse& use = uses[i];
    size_t after = use.at + use.name.size();
    std::vector<BracketEntry> entries;
    if (use.open != std::string::npos) {
      const size_t close = matching_close(src_, use.open);
      entries = bracket_entries(src_, use.open, close);
      after = close + 1;
    }
    const IdentifierUse* function = function_after(uses, i, after, "def");
    if (!function) return;
    const size_t def_at = (function - 1)->at;  // the `def` keyword
    const size_t body_end = python_block_end(code_, function->at);
    const auto [name, name_at] = name_of(*function, entries);
    std::string description;
    if (const BracketEntry* d = entry_named(entries, "description")) {
      description = literal_text(src_, d->value_begin, d->value_end);
    } else {
      description = docstring(def_at, body_end);
    }
    const size_t at = code_.rfind('@', use.chain_start);
    add(name, name_at, description, "@tool def", at == std::string::npos ? use.chain_start : at, body_end);
  }

  // The first statement of the body, when it is a string.
  std::string docstring(size_t def_at, size_t body_end) {
    size_t k = def_at;
    int depth = 0;
    for (; k < body_end; ++k) {  // the ':' that ends the header
      const char c = code_[k];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (c == ':' && depth == 0) break;
    }
    const size_t first = skip_space(code_, k + 1, body_end);
    const StringLiteral* doc = src_.string_at(first);
    return doc ? doc->text : "";
  }

  // True iff the identifier at offset stands right after "#[".
  bool rust_attribute_at(size_t offset) const {
    const size_t bracket = skip_back_space(code_, offset);
    if (bracket == 0 || code_[bracket - 1] != '[') return false;
    const size_t hash = skip_back_space(code_, bracket - 1);
    return hash > 0 && code_[hash - 1] == '#';
  }

  // #[tool(...)] above a fn.
  void rust_attribute(const std::vector<IdentifierUse>& uses, size_t i) {
    const IdentifierUse& use = uses[i];
    const size_t at = code_.rfind('#', use.at);
    const size_t attr_close = matching_close(src_, code_.rfind('[', use.at));
    std::vector<BracketEntry> entries;
    if (use.open != std::string::npos) entries = bracket_entries(src_, use.open, matching_close(src_, use.open));
    const IdentifierUse* function = function_after(uses, i, attr_close, "fn");
    if (!function) return;
    const size_t body_open = code_.find('{', function->at);
    const size_t body_end = body_open == std::string::npos ? code_.size() : matching_close(src_, body_open) + 1;
    const auto [name, name_at] = name_of(*function, entries);
    const BracketEntry* d = entry_named(entries, "description");
    add(name, name_at, d ? literal_text(src_, d->value_begin, d->value_end) : "", "#[tool] fn", at,
        std::min(body_end, code_.size()));
  }

  const SourceFile& file_;
  const MaskedSource& src_;
  const std::string& code_;
  const size_t index_;
  std::vector<ToolDeclaration> found_;
  std::set<size_t> seen_names_at_;
};

}  // namespace

Json written_hints(const MaskedSource& source, size_t begin, size_t end) {
  static const std::pair<const char*, const char*> kHints[] = {
      {"readonlyhint", "readOnlyHint"}, {"idempotenthint", "idempotentHint"}, {"destructivehint", "destructiveHint"}};
  const std::string& code = source.code;
  end = std::min(end, code.size());
  Json hints = Json::object();
  // The first true/false after `at`, before the entry ends.
  auto value_after = [&](size_t at) -> std::optional<bool> {
    std::optional<bool> value;
    const size_t stop = std::min(end, at + 60);
    const size_t entry_end = code.find_first_of(",;}\n", at);
    for_each_identifier(code, at, std::min(stop, entry_end), [&](size_t, std::string_view word) {
      if (value) return;
      if (word == "true" || word == "True") value = true;
      if (word == "false" || word == "False") value = false;
    });
    return value;
  };
  auto note = [&](std::string_view name, size_t after, bool exact) {
    std::string normal;
    for (char c : name) {
      if (c != '_' && c != '-') normal += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    for (const auto& [spelled, key] : kHints) {
      const bool named = exact ? normal == spelled : normal.find(spelled) != std::string::npos;
      if (!named || hints.contains(key)) continue;
      if (auto value = value_after(after)) hints[key] = *value;
    }
  };
  for_each_identifier(code, begin, end, [&](size_t at, std::string_view name) { note(name, at + name.size(), false); });
  for (const StringLiteral* literal : source.strings_in(begin, end)) note(literal->text, literal->end, true);  // {"readOnlyHint": True}
  return hints;
}

std::vector<BracketEntry> bracket_entries(const MaskedSource& source, size_t open, size_t close) {
  const std::string& code = source.code;
  std::vector<BracketEntry> entries;
  if (open >= code.size()) return entries;
  close = std::min(close, code.size());
  size_t start = open + 1;
  for (size_t k = open + 1; k <= close; ++k) {
    const char c = k < close ? code[k] : ',';
    if (k < close && (c == '(' || c == '[' || c == '{')) {
      k = std::min(matching_close(source, k), close - 1);  // nested: one step, never rescanned
      continue;
    }
    if (c != ',') continue;
    // One entry in [start, k): a key when an identifier or a literal is
    // followed by ':' or '=' (not '::', '==', '=>', ':=').
    const size_t first = skip_space(code, start, k);
    if (first < k) {
      BracketEntry entry{"", first, k};
      size_t key_end = first;
      std::string key;
      if (const StringLiteral* literal = source.string_at(first)) {
        key = literal->text;
        key_end = literal->end;
      } else {
        while (key_end < k && is_identifier_char(code[key_end])) ++key_end;
        key = code.substr(first, key_end - first);
      }
      const size_t sep = skip_space(code, key_end, k);
      const bool colon = sep < k && code[sep] == ':' && (sep + 1 >= k || (code[sep + 1] != ':' && code[sep + 1] != '='));
      const bool equals = sep < k && code[sep] == '=' && (sep + 1 >= k || (code[sep + 1] != '=' && code[sep + 1] != '>'));
      if (!key.empty() && key_end > first && (colon || equals)) {
        entry.key = key;
        entry.value_begin = sep + 1;
      }
      entries.push_back(entry);
    }
    start = k + 1;
  }
  return entries;
}

std::string literal_text(const MaskedSource& source, size_t begin, size_t end) {
  std::string text;
  for (const StringLiteral* literal : source.strings_in(begin, end)) text += literal->text;
  return text;
}

std::vector<ToolDeclaration> find_declarations(const SourceFile& file, size_t file_index) {
  return Finder(file, file_index).run();
}

std::vector<ToolDeclaration> find_declarations(const SourceTree& tree) {
  std::vector<ToolDeclaration> all;
  for (size_t i = 0; i < tree.files.size(); ++i) {
    auto found = find_declarations(tree.files[i], i);
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

}  // namespace effectfence::scan
