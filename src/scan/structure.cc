#include "scan/structure.h"

#include <algorithm>
#include <cctype>

#include "scan/lexer.h"

namespace effectfence::scan {
namespace {

size_t indent_of_line(std::string_view code, size_t line_start) {
  size_t k = line_start;
  while (k < code.size() && (code[k] == ' ' || code[k] == '\t')) ++k;
  return k - line_start;
}

size_t line_start_of(std::string_view code, size_t offset) {
  const size_t nl = offset == 0 ? std::string_view::npos : code.rfind('\n', offset - 1);
  return nl == std::string_view::npos ? 0 : nl + 1;
}

}  // namespace

size_t matching_close(const MaskedSource& source, size_t open) {
  auto it = std::lower_bound(source.brackets.begin(), source.brackets.end(), std::make_pair(open, size_t{0}));
  return it != source.brackets.end() && it->first == open ? it->second : source.code.size();
}

size_t line_end(std::string_view code, size_t offset) {
  const size_t nl = code.find('\n', offset);
  return nl == std::string_view::npos ? code.size() : nl + 1;
}

size_t python_block_end(std::string_view code, size_t offset) {
  const size_t header_start = line_start_of(code, offset);
  const size_t header_indent = indent_of_line(code, header_start);
  // The header ends at the end of the line where its brackets are balanced.
  size_t k = header_start;
  int depth = 0;
  for (; k < code.size(); ++k) {
    const char c = code[k];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == '\n' && depth <= 0) break;
  }
  size_t line = k < code.size() ? k + 1 : code.size();
  while (line < code.size()) {
    const size_t indent = indent_of_line(code, line);
    const size_t first = line + indent;
    const bool blank = first >= code.size() || code[first] == '\n' || code[first] == '\r';
    if (!blank && indent <= header_indent) return line;
    line = line_end(code, line);
  }
  return code.size();
}

std::string_view identifier_before(std::string_view code, size_t offset) {
  size_t end = offset;
  while (end > 0 && std::isspace(static_cast<unsigned char>(code[end - 1]))) --end;
  size_t begin = end;
  while (begin > 0 && is_identifier_char(code[begin - 1])) --begin;
  return code.substr(begin, end - begin);
}

void for_each_identifier(std::string_view code, size_t begin, size_t end,
                         const std::function<void(size_t, std::string_view)>& each) {
  end = std::min(end, code.size());
  size_t k = begin;
  while (k < end) {
    const char c = code[k];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$') {
      const size_t start = k;
      while (k < end && is_identifier_char(code[k])) ++k;
      if (word_starts_at(code, start)) each(start, code.substr(start, k - start));
    } else {
      ++k;
    }
  }
}

bool word_starts_at(std::string_view code, size_t at) { return at == 0 || !is_identifier_char(code[at - 1]); }

size_t skip_back_space(std::string_view code, size_t offset) {
  while (offset > 0 && std::isspace(static_cast<unsigned char>(code[offset - 1]))) --offset;
  return offset;
}

std::vector<IdentifierUse> identifier_uses(std::string_view code) {
  std::vector<IdentifierUse> uses;
  for_each_identifier(code, 0, code.size(), [&](size_t at, std::string_view name) {
    IdentifierUse use;
    use.at = at;
    use.name = name;
    use.chain_start = at;
    size_t after = at + name.size();
    while (after < code.size() && std::isspace(static_cast<unsigned char>(code[after]))) ++after;
    use.next = after;
    if (after < code.size() && code[after] == '(') use.open = after;
    size_t before = skip_back_space(code, at);
    use.member = before > 0 && code[before - 1] == '.';
    while (before > 0 && code[before - 1] == '.') {
      const std::string_view prev = identifier_before(code, before - 1);
      if (prev.empty()) break;
      if (use.receiver.empty()) use.receiver = prev;
      use.chain_start = static_cast<size_t>(prev.data() - code.data());
      before = skip_back_space(code, use.chain_start);
    }
    use.decorator = before > 0 && code[before - 1] == '@';
    uses.push_back(use);
  });
  return uses;
}

}  // namespace effectfence::scan
