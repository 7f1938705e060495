#include "scan/lexer.h"

#include <algorithm>
#include <cctype>

namespace effectfence::scan {
namespace {

class Masker {
 public:
  Masker(std::string_view text, Language language) : text_(text), language_(language) {
    out_.code.assign(text.begin(), text.end());
  }

  MaskedSource run() {
    size_t i = 0;
    while (i < text_.size()) i = step(i);
    // Literals inside a template's ${...} were recorded before the template.
    std::stable_sort(out_.strings.begin(), out_.strings.end(),
                     [](const StringLiteral& a, const StringLiteral& b) { return a.begin < b.begin; });
    pair_brackets();
    out_.line_starts.push_back(0);
    for (size_t k = 0; k < text_.size(); ++k) {
      if (text_[k] == '\n') out_.line_starts.push_back(k + 1);
    }
    return std::move(out_);
  }

 private:
  char at(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }
  bool starts(size_t i, std::string_view s) const { return text_.substr(i, s.size()) == s; }

  void pair_brackets() {
    std::vector<size_t> open;
    const std::string& code = out_.code;
    for (size_t k = 0; k < code.size(); ++k) {
      const char c = code[k];
      if (c == '(' || c == '[' || c == '{') {
        open.push_back(k);
      } else if ((c == ')' || c == ']' || c == '}') && !open.empty()) {
        out_.brackets.emplace_back(open.back(), k);
        open.pop_back();
      }
    }
    for (size_t unclosed : open) out_.brackets.emplace_back(unclosed, code.size());
    std::sort(out_.brackets.begin(), out_.brackets.end());
  }

  // Blanks [begin, end) except newlines.
  void blank(size_t begin, size_t end) {
    for (size_t k = begin; k < end && k < text_.size(); ++k) {
      if (text_[k] != '\n') out_.code[k] = ' ';
    }
  }

  // Handles what starts at i; returns where to go on.
  size_t step(size_t i) {
    const char c = text_[i];
    const bool hash_comment = language_ == Language::python && c == '#';
    if (hash_comment || (language_ != Language::python && starts(i, "//"))) return line_comment(i);
    if (language_ != Language::python && starts(i, "/*")) return block_comment(i);
    if (language_ == Language::rust) {
      if (size_t end = rust_raw_string(i)) return end;
      if (c == '\'') return rust_quote(i);
    }
    if (language_ == Language::python && (c == '"' || c == '\'')) return python_string(i);
    if (language_ == Language::javascript) {
      if (c == '`') return template_literal(i);
      if (c == '/') {
        if (size_t end = regex_literal(i)) return end;
      }
    }
    if (c == '"' || c == '\'' || (c == '`' && language_ != Language::rust)) {
      const bool raw = c == '`' && language_ == Language::go;  // Go raw strings have no escapes
      return quoted(i, i, 1, std::string(1, c), !raw);
    }
    return i + 1;
  }

  size_t line_comment(size_t i) {
    size_t end = text_.find('\n', i);
    if (end == std::string_view::npos) end = text_.size();
    blank(i, end);
    return end;
  }

  size_t block_comment(size_t i) {
    // Rust block comments nest; the others end at the first */.
    int depth = 0;
    size_t k = i;
    while (k < text_.size()) {
      if (starts(k, "/*")) {
        ++depth;
        k += 2;
      } else if (starts(k, "*/")) {
        k += 2;
        if (--depth == 0 || language_ != Language::rust) break;
      } else {
        ++k;
      }
    }
    blank(i, k);
    return k;
  }

  // A literal that opened at begin, whose body starts at i + open_len and
  // ends with close. Blanks the body, records the text, returns the end.
  size_t quoted(size_t begin, size_t i, size_t open_len, const std::string& close, bool escapes) {
    size_t k = i + open_len;
    std::string text;
    bool closed = false;
    while (k < text_.size()) {
      if (starts(k, close)) {
        closed = true;
        break;
      }
      if (escapes && text_[k] == '\\' && k + 1 < text_.size()) {
        const char e = text_[k + 1];
        switch (e) {
          case 'n': text += '\n'; break;
          case 't': text += '\t'; break;
          case '"': case '\'': case '\\': case '`': text += e; break;
          default: text += '\\'; text += e;
        }
        k += 2;
        continue;
      }
      // A one-line literal ends at the line's end even without its quote.
      if (text_[k] == '\n' && close.size() == 1 && close != "`") break;
      text += text_[k];
      ++k;
    }
    blank(i + open_len, k);
    const size_t end = closed ? k + close.size() : k;
    out_.strings.push_back(StringLiteral{begin, end, std::move(text)});
    return end;
  }

  // A JavaScript template: its text is a literal, the code in each ${...}
  // is code (a write inside one is a write). The literal's text keeps the
  // ${...} as written.
  size_t template_literal(size_t begin) {
    std::string text;
    size_t k = begin + 1;
    size_t segment = k;  // start of the text not yet blanked
    while (k < text_.size() && text_[k] != '`') {
      if (text_[k] == '\\' && k + 1 < text_.size()) {
        const char e = text_[k + 1];
        text += (e == '`' || e == '\\' || e == '$') ? std::string(1, e) : std::string{'\\', e};
        k += 2;
      } else if (starts(k, "${") && template_depth_ >= kMaxTemplateNesting) {
        // Too deep to follow: the rest of the file is one unread literal.
        if (!out_.unread_from) out_.unread_from = k;
        k = text_.size();
        break;
      } else if (starts(k, "${")) {
        blank(segment, k + 2);
        ++template_depth_;
        const size_t close = code_until_brace(k + 2);
        --template_depth_;
        text += std::string(text_.substr(k, close - k));
        if (close > k + 2 && text_[close - 1] == '}') blank(close - 1, close);
        k = segment = close;
      } else {
        text += text_[k++];
      }
    }
    blank(segment, k);
    const size_t end = k < text_.size() ? k + 1 : k;
    out_.strings.push_back(StringLiteral{begin, end, std::move(text)});
    return end;
  }

  // Masks code from i up to the '}' that closes a ${ (nested braces,
  // strings, comments and templates included); returns just past it.
  size_t code_until_brace(size_t i) {
    int depth = 0;
    while (i < text_.size()) {
      if (text_[i] == '{') {
        ++depth;
        ++i;
      } else if (text_[i] == '}') {
        if (depth-- == 0) return i + 1;
        ++i;
      } else {
        i = step(i);
      }
    }
    return i;
  }

  // A regular-expression literal starting at i, by what precedes it: after
  // an operator, an opening bracket, a comma or a keyword like return, '/'
  // starts a regex; after a name, a number or a closing bracket it divides.
  // Blanks the body (a quote inside must not open a string) and returns its
  // end; 0 when it is division or the line ends first.
  size_t regex_literal(size_t i) {
    if (!regex_may_start(i)) return 0;
    bool in_class = false;
    size_t k = i + 1;
    for (; k < text_.size(); ++k) {
      const char c = text_[k];
      if (c == '\n') return 0;
      if (c == '\\') {
        ++k;
      } else if (c == '[') {
        in_class = true;
      } else if (c == ']') {
        in_class = false;
      } else if (c == '/' && !in_class) {
        break;
      }
    }
    if (k >= text_.size() || k == i + 1) return 0;
    blank(i + 1, k);
    ++k;
    while (k < text_.size() && std::isalpha(static_cast<unsigned char>(text_[k]))) ++k;  // flags
    return k;
  }

  bool regex_may_start(size_t i) const {
    const size_t j = skip_spaces_back(i);
    if (j == 0) return true;
    const char before = out_.code[j - 1];
    if (before == ')') return closes_control_condition(j - 1);
    if (before == ']') return false;
    if (!is_identifier_char(before)) return before != '.' && before != '"' && before != '\'' && before != '`';
    const std::string_view word = word_ending_at(j);
    for (std::string_view keyword : {"return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void",
                                     "throw", "instanceof", "yield", "await"}) {
      if (word == keyword) return true;
    }
    return false;
  }

  // True iff the ')' at close ends the condition of an if, while, for or
  // with: what follows is a statement, so a '/' there opens a regex, where
  // after any other ')' (a call, a grouping) it divides.
  bool closes_control_condition(size_t close) const {
    int depth = 0;
    size_t k = close + 1;
    while (k > 0) {
      --k;
      const char c = out_.code[k];
      if (c == ')') ++depth;
      if (c == '(' && --depth == 0) break;
    }
    if (depth != 0) return false;
    const std::string_view word = word_ending_at(skip_spaces_back(k));
    return word == "if" || word == "while" || word == "for" || word == "with";
  }

  // Where the code before i ends once the spaces before i are skipped.
  size_t skip_spaces_back(size_t i) const {
    while (i > 0 && std::isspace(static_cast<unsigned char>(out_.code[i - 1]))) --i;
    return i;
  }

  // The identifier that ends at end in the code, empty when there is none.
  std::string_view word_ending_at(size_t end) const {
    size_t w = end;
    while (w > 0 && is_identifier_char(out_.code[w - 1])) --w;
    return std::string_view(out_.code.data() + w, end - w);
  }

  size_t python_string(size_t i) {
    // Prefixes (r, b, f, u and pairs) belong to the literal.
    size_t begin = i;
    while (begin > 0 && std::isalpha(static_cast<unsigned char>(text_[begin - 1])) && i - begin < 2) --begin;
    std::string prefix(text_.substr(begin, i - begin));
    for (char& ch : prefix) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const bool prefixed = !prefix.empty() && prefix.find_first_not_of("rbfu") == std::string::npos &&
                          (begin == 0 || !is_identifier_char(text_[begin - 1]));
    if (!prefixed) begin = i;
    const bool raw = prefixed && prefix.find('r') != std::string::npos;
    const std::string triple(3, text_[i]);
    if (starts(i, triple)) return quoted(begin, i, 3, triple, !raw);
    return quoted(begin, i, 1, std::string(1, text_[i]), !raw);
  }

  // r"..", r#".."#, br".." starting at i; 0 when there is none.
  size_t rust_raw_string(size_t i) {
    if (i > 0 && is_identifier_char(text_[i - 1])) return 0;
    size_t k = i;
    if (at(k) == 'b') ++k;
    if (at(k) != 'r') return 0;
    ++k;
    size_t hashes = 0;
    while (at(k) == '#') ++hashes, ++k;
    if (at(k) != '"') return 0;
    return quoted(i, k, 1, "\"" + std::string(hashes, '#'), false);
  }

  // 'x' or '\n' is a char literal; 'a in fn f<'a> is a lifetime (code).
  size_t rust_quote(size_t i) {
    if (at(i + 1) == '\\') return quoted(i, i, 1, "'", true);
    if (at(i + 2) == '\'') return quoted(i, i, 1, "'", false);
    // A multi-byte UTF-8 character between quotes.
    if (static_cast<unsigned char>(at(i + 1)) >= 0x80) {
      const size_t close = text_.find('\'', i + 1);
      if (close != std::string_view::npos && close - i <= 5) return quoted(i, i, 1, "'", false);
    }
    return i + 1;
  }

  std::string_view text_;
  Language language_;
  MaskedSource out_;
  int template_depth_ = 0;  // ${...} being read, one inside the other
};

}  // namespace

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

const char* language_name(Language language) {
  switch (language) {
    case Language::javascript: return "javascript";
    case Language::python: return "python";
    case Language::go: return "go";
    case Language::rust: return "rust";
  }
  return "unknown";
}

std::optional<Language> language_of_path(std::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view ext = path.substr(dot + 1);
  for (std::string_view js : {"ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs"}) {
    if (ext == js) return Language::javascript;
  }
  if (ext == "py") return Language::python;
  if (ext == "go") return Language::go;
  if (ext == "rs") return Language::rust;
  return std::nullopt;
}

int MaskedSource::line_of(size_t offset) const {
  auto it = std::upper_bound(line_starts.begin(), line_starts.end(), offset);
  return static_cast<int>(it - line_starts.begin());
}

const StringLiteral* MaskedSource::string_at(size_t offset) const {
  auto it = std::lower_bound(strings.begin(), strings.end(), offset,
                             [](const StringLiteral& s, size_t at) { return s.begin < at; });
  return it != strings.end() && it->begin == offset ? &*it : nullptr;
}

std::vector<const StringLiteral*> MaskedSource::strings_in(size_t begin, size_t end) const {
  std::vector<const StringLiteral*> found;
  auto it = std::lower_bound(strings.begin(), strings.end(), begin,
                             [](const StringLiteral& s, size_t at) { return s.begin < at; });
  for (; it != strings.end() && it->begin < end; ++it) found.push_back(&*it);
  return found;
}

MaskedSource mask_source(std::string_view text, Language language) { return Masker(text, language).run(); }

}  // namespace effectfence::scan
