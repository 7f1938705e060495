// The scan's lexer and declaration finder (src/scan) on any source text.
// Input: one byte choosing the language, then the text.
// Oracles: no crash, no stack overflow (deep nesting is bounded and
// named); the masked code has the text's length, keeps every newline
// where it was and changes bytes only to spaces; literals are in order and
// inside the text; bracket pairs are ordered and inside it; declarations
// found lie inside the text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "oracle.h"
#include "scan/declarations.h"
#include "scan/lexer.h"
#include "scan/source_tree.h"

using namespace effectfence::scan;
namespace fuzz = effectfence::fuzz;
using effectfence::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr Language kLanguages[] = {Language::javascript, Language::python, Language::go, Language::rust};
  const Language language = kLanguages[data[0] % 4];
  SourceFile file{"fuzz", language, std::string(reinterpret_cast<const char*>(data + 1), size - 1), {}};
  file.masked = mask_source(file.text, language);
  const MaskedSource& m = file.masked;
  const std::string& text = file.text;
  require(m.code.size() == text.size() + (effectfence::fuzz::planted() ? 1 : 0), "masked code changed length");
  // The failure messages are built only on failure: built for every byte,
  // they cost more than the scan itself.
  for (size_t k = 0; k < text.size(); ++k) {
    if ((text[k] == '\n') != (m.code[k] == '\n')) fuzz::oracle_failed("a newline moved at offset " + std::to_string(k));
    if (m.code[k] != text[k] && m.code[k] != ' ') fuzz::oracle_failed("masking wrote something other than a space");
  }
  for (size_t k = 0; k < m.strings.size(); ++k) {
    const StringLiteral& s = m.strings[k];
    require(s.begin < s.end && s.end <= text.size(), "a literal outside the text");
    require(k == 0 || m.strings[k - 1].begin <= s.begin, "literals out of order");
  }
  for (const auto& [open, close] : m.brackets) require(open < close && close <= text.size(), "a bracket pair out of place");
  require(m.line_starts.size() == static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1,
          "line starts do not match the newlines");
  if (m.unread_from) require(*m.unread_from < text.size(), "unread_from outside the text");
  for (const ToolDeclaration& d : find_declarations(file, 0)) {
    require(d.line >= 1 && d.line <= static_cast<int>(m.line_starts.size()), "a declaration on no line of the text");
    if (d.begin > d.end || d.end > text.size()) {
      fuzz::oracle_failed("a declaration (" + d.form + ", line " + std::to_string(d.line) + ") at [" +
                          std::to_string(d.begin) + ", " + std::to_string(d.end) + ") of " +
                          std::to_string(text.size()) + " bytes");
    }
  }
  return 0;
}
