// Where a construct ends, read off masked code (see lexer.h), so brackets
// inside strings and comments never count.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "scan/lexer.h"

namespace effectfence::scan {

// The offset of the bracket that closes the one at open ('(', '[' or '{'),
// or code.size() when it is never closed (or open is no bracket).
size_t matching_close(const MaskedSource& source, size_t open);

// The end of the Python block whose header line holds offset: the start of
// the first later non-blank line indented no deeper than that header line
// (a header continued over bracketed lines counts as one line).
size_t python_block_end(std::string_view code, size_t offset);

// The offset just past the end of the line holding offset.
size_t line_end(std::string_view code, size_t offset);

// The whole identifier that ends just before offset (skipping spaces), or "".
std::string_view identifier_before(std::string_view code, size_t offset);

// Calls each(offset, identifier) for every identifier in [begin, end) of
// code, in order (a plain loop: std::regex is slow on large files).
void for_each_identifier(std::string_view code, size_t begin, size_t end,
                         const std::function<void(size_t, std::string_view)>& each);

// One identifier of masked code and how it is used.
struct IdentifierUse {
  size_t at = 0;
  std::string_view name;
  size_t open = std::string_view::npos;  // the '(' right after it (a call), if any
  size_t next = 0;                       // offset of the first non-space character after it
  bool member = false;                   // a '.' before it
  std::string_view receiver;             // the identifier before that '.', if any
  size_t chain_start = 0;                // where a dotted chain a.b.name begins
  bool decorator = false;                // '@' before the chain
};

// Every identifier of code, in order.
std::vector<IdentifierUse> identifier_uses(std::string_view code);

// The offset of the first non-space character before offset ends, i.e.
// offset moved back over spaces.
size_t skip_back_space(std::string_view code, size_t offset);

// True iff code[at] starts a word: not preceded by an identifier character.
bool word_starts_at(std::string_view code, size_t at);

}  // namespace effectfence::scan
