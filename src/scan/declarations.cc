#include "scan/declarations.h"

#include <algorithm>
#include <cctype>
#include <regex>
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
      const auto inner = bracket_entries(source, first, matching_close(source.code, first));
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
    switch (file_.language) {
      case Language::javascript:
        calls(std::regex(R"(\.\s*(tool|registerTool|addTool)\s*\()"), "");
        object_literals();
        break;
      case Language::python:
        python_decorators();
        keyed_constructor(std::regex(R"(\bTool\s*\()"), "Tool(...)");
        break;
      case Language::go:
        calls(std::regex(R"(\bNewTool\s*\()"), "NewTool(...)");
        keyed_constructor(std::regex(R"(\bTool\s*\{)"), "Tool{...}");
        break;
      case Language::rust:
        rust_attributes();
        calls(std::regex(R"(\bTool\s*::\s*new\s*\()"), "Tool::new(...)");
        keyed_constructor(std::regex(R"(\bTool\s*\{)"), "Tool {...}");
        break;
    }
    std::sort(found_.begin(), found_.end(),
              [](const ToolDeclaration& a, const ToolDeclaration& b) { return a.begin < b.begin; });
    return found_;
  }

 private:
  void add(std::string name, size_t name_at, std::string description, std::string form, size_t begin, size_t end) {
    if (name.empty() || !seen_names_at_.insert(name_at).second) return;
    found_.push_back(ToolDeclaration{std::move(name), std::move(description), std::move(form), index_,
                                     src_.line_of(name_at), begin, end});
  }

  // NAME(  "tool-name", ...): the first argument is the name.
  void calls(const std::regex& pattern, const std::string& fixed_form) {
    for (std::sregex_iterator it(code_.begin(), code_.end(), pattern), end; it != end; ++it) {
      const size_t open = static_cast<size_t>(it->position(0) + it->length(0) - 1);
      const size_t close = matching_close(code_, open);
      const auto entries = bracket_entries(src_, open, close);
      if (entries.empty() || !entries[0].key.empty()) continue;
      const StringLiteral* name = sole_literal(src_, entries[0].value_begin, entries[0].value_end);
      if (!name) continue;
      const std::string form = fixed_form.empty() ? (*it)[1].str() + "(...)" : fixed_form;
      add(name->text, name->begin, description_in(src_, entries), form, static_cast<size_t>(it->position(0)),
          close + 1);
    }
  }

  // Tool(name=..., description=...) / Tool{Name: ..., Description: ...}.
  void keyed_constructor(const std::regex& pattern, const std::string& form) {
    for (std::sregex_iterator it(code_.begin(), code_.end(), pattern), end; it != end; ++it) {
      const size_t open = static_cast<size_t>(it->position(0) + it->length(0) - 1);
      named_list(open, form, static_cast<size_t>(it->position(0)));
    }
  }

  // A bracketed list with a string `name` entry; returns true iff it was one.
  bool named_list(size_t open, const std::string& form, size_t begin) {
    const size_t close = matching_close(code_, open);
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
      const size_t close = matching_close(code_, open);
      const auto entries = bracket_entries(src_, open, close);
      const bool has_schema = entry_named(entries, "inputschema") || entry_named(entries, "input_schema") ||
                              entry_named(entries, "parameters");
      if (has_schema && entry_named(entries, "description")) named_list(open, "object literal", open);
    }
  }

  // @something.tool / @tool(...) above a def: the name is name= or the
  // function's; the description is description= or the docstring.
  void python_decorators() {
    static const std::regex pattern(R"(@\s*(?:[A-Za-z_][\w.]*\.)?tool\b)");
    for (std::sregex_iterator it(code_.begin(), code_.end(), pattern), end; it != end; ++it) {
      const size_t at = static_cast<size_t>(it->position(0));
      size_t after = at + static_cast<size_t>(it->length(0));
      std::vector<BracketEntry> entries;
      const size_t paren = skip_space(code_, after, code_.size());
      if (paren < code_.size() && code_[paren] == '(') {
        const size_t close = matching_close(code_, paren);
        entries = bracket_entries(src_, paren, close);
        after = close + 1;
      }
      static const std::regex def(R"(\bdef\s+([A-Za-z_]\w*))");
      std::smatch m;
      std::string::const_iterator from = code_.begin() + static_cast<std::ptrdiff_t>(after);
      if (!std::regex_search(from, code_.cend(), m, def)) continue;
      const size_t def_at = static_cast<size_t>(m.position(0)) + after;
      const size_t body_end = python_block_end(code_, def_at);
      std::string name = m[1].str();
      size_t name_at = static_cast<size_t>(m.position(1)) + after;
      if (const BracketEntry* n = entry_named(entries, "name")) {
        if (const StringLiteral* literal = sole_literal(src_, n->value_begin, n->value_end)) {
          name = literal->text;
          name_at = literal->begin;
        }
      }
      std::string description;
      if (const BracketEntry* d = entry_named(entries, "description")) {
        description = literal_text(src_, d->value_begin, d->value_end);
      } else {
        description = docstring(def_at, body_end);
      }
      add(name, name_at, description, "@tool def", at, body_end);
    }
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

  // #[tool(...)] above a fn.
  void rust_attributes() {
    static const std::regex pattern(R"(#\s*\[\s*tool\s*(\(|\]))");
    for (std::sregex_iterator it(code_.begin(), code_.end(), pattern), end; it != end; ++it) {
      const size_t at = static_cast<size_t>(it->position(0));
      const size_t bracket = code_.find('[', at);
      const size_t attr_close = matching_close(code_, bracket);
      std::vector<BracketEntry> entries;
      if ((*it)[1].str() == "(") {
        const size_t paren = static_cast<size_t>(it->position(1));
        entries = bracket_entries(src_, paren, matching_close(code_, paren));
      }
      static const std::regex fn(R"(\bfn\s+([A-Za-z_]\w*))");
      std::smatch m;
      std::string::const_iterator from = code_.begin() + static_cast<std::ptrdiff_t>(attr_close);
      if (!std::regex_search(from, code_.cend(), m, fn)) continue;
      const size_t fn_at = static_cast<size_t>(m.position(0)) + attr_close;
      const size_t body_open = code_.find('{', fn_at);
      const size_t body_end = body_open == std::string::npos ? code_.size() : matching_close(code_, body_open) + 1;
      std::string name = m[1].str();
      size_t name_at = static_cast<size_t>(m.position(1)) + attr_close;
      if (const BracketEntry* n = entry_named(entries, "name")) {
        if (const StringLiteral* literal = sole_literal(src_, n->value_begin, n->value_end)) {
          name = literal->text;
          name_at = literal->begin;
        }
      }
      const BracketEntry* d = entry_named(entries, "description");
      add(name, name_at, d ? literal_text(src_, d->value_begin, d->value_end) : "", "#[tool] fn", at,
          std::min(body_end, code_.size()));
    }
  }

  const SourceFile& file_;
  const MaskedSource& src_;
  const std::string& code_;
  const size_t index_;
  std::vector<ToolDeclaration> found_;
  std::set<size_t> seen_names_at_;
};

}  // namespace

std::vector<BracketEntry> bracket_entries(const MaskedSource& source, size_t open, size_t close) {
  const std::string& code = source.code;
  std::vector<BracketEntry> entries;
  if (open >= code.size()) return entries;
  close = std::min(close, code.size());
  size_t start = open + 1;
  int depth = 0;
  for (size_t k = open + 1; k <= close; ++k) {
    const char c = k < close ? code[k] : ',';
    if (k < close && (c == '(' || c == '[' || c == '{')) {
      ++depth;
      continue;
    }
    if (k < close && (c == ')' || c == ']' || c == '}')) {
      --depth;
      continue;
    }
    if (c != ',' || depth != 0) continue;
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
