// A small per-language lexer for the source scan: it separates code from
// string literals and comments, so that a word counts as code only when it
// is code (a guard named in a comment or a log message guards nothing).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace effectfence::scan {

enum class Language { javascript, python, go, rust };  // javascript covers TypeScript

const char* language_name(Language language);

// True iff c may be part of an identifier in any of the languages
// (letters, digits, '_', and JavaScript's '$').
bool is_identifier_char(char c);

// The language of a file by its extension (.ts .tsx .js .jsx .mjs .cjs .py
// .go .rs), else nullopt.
std::optional<Language> language_of_path(std::string_view path);

// One string literal: where it stands and its text without quotes (escapes
// resolved for \n \t \" \' \\; other escapes kept as written).
struct StringLiteral {
  size_t begin = 0;  // offset of the opening quote (or prefix)
  size_t end = 0;    // offset just past the closing quote
  std::string text;
};

// A source file split into code and literals. code has the length of the
// text: comments and the insides of string literals are spaces (newlines
// kept, so offsets and line numbers stay valid); quotes stay in place.
struct MaskedSource {
  std::string code;
  std::vector<StringLiteral> strings;  // in order of appearance
  std::vector<size_t> line_starts;     // offset of each line's first byte
  // (open, close) of every bracket pair in code, by open; an unclosed
  // bracket closes at code.size(). Found once, so that reading a
  // declaration never rescans what lies inside it.
  std::vector<std::pair<size_t, size_t>> brackets;
  // Set when JavaScript templates nest deeper than kMaxTemplateNesting: the
  // offset of the ${ that would have gone deeper. From there on the text is
  // masked as one literal and not read (a bounded stack, not a crash).
  std::optional<size_t> unread_from;

  // 1-based line number of offset.
  int line_of(size_t offset) const;
  // The literal that starts at offset, or nullptr.
  const StringLiteral* string_at(size_t offset) const;
  // The literals that begin within [begin, end).
  std::vector<const StringLiteral*> strings_in(size_t begin, size_t end) const;
};

// How deep `${`${...}`}` may nest before the lexer stops reading a file.
// Each level costs stack frames and a copy of the template's text.
constexpr int kMaxTemplateNesting = 32;

// Never fails: unterminated literals and comments run to the end of the text.
// In JavaScript, a regular-expression literal's body is masked too (told
// from division by what precedes the '/'; not recorded as a literal), and
// the code inside a template's ${...} stays code.
MaskedSource mask_source(std::string_view text, Language language);

}  // namespace effectfence::scan
