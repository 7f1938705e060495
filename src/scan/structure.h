// Where a construct ends, read off masked code (see lexer.h), so brackets
// inside strings and comments never count.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace effectfence::scan {

// The offset of the bracket that closes the one at open ('(', '[' or '{'),
// or code.size() when it is never closed.
size_t matching_close(std::string_view code, size_t open);

// The first of the brackets in `which` at or after from, skipping nothing
// else; npos when none comes before stop_at.
size_t next_of(std::string_view code, size_t from, std::string_view which, size_t stop_at);

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

// True iff code[at] starts a word: not preceded by an identifier character.
bool word_starts_at(std::string_view code, size_t at);

}  // namespace effectfence::scan
