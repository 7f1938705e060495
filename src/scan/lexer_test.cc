#include <catch2/catch.hpp>

#include <string>

#include "scan/lexer.h"

using namespace effectfence::scan;

namespace {

std::string code_of(const std::string& text, Language language) { return mask_source(text, language).code; }

bool code_has(const std::string& text, Language language, const std::string& word) {
  return code_of(text, language).find(word) != std::string::npos;
}

}  // namespace

TEST_CASE("comments and string contents are masked, code, quotes and line breaks stay", "[scan][lexer]") {
  const std::string text = "const k = deriveKey(); // idempotencyKey here\n/* dedupeKey\n */ send(\"requestId\");\n";
  const MaskedSource m = mask_source(text, Language::javascript);
  REQUIRE(m.code.size() == text.size());
  CHECK(m.code.find("deriveKey") != std::string::npos);
  CHECK(m.code.find("send(\"") != std::string::npos);
  CHECK(m.code.find("idempotencyKey") == std::string::npos);
  CHECK(m.code.find("dedupeKey") == std::string::npos);
  CHECK(m.code.find("requestId") == std::string::npos);
  CHECK(std::count(m.code.begin(), m.code.end(), '\n') == 3);
  REQUIRE(m.strings.size() == 1);
  CHECK(m.strings[0].text == "requestId");
  CHECK(m.line_of(m.strings[0].begin) == 3);
}

TEST_CASE("JavaScript template literals and escaped quotes stay one literal", "[scan][lexer]") {
  const MaskedSource m = mask_source("f(`a ${b} \\` c`, 'it\\'s', \"x\\\"y\")", Language::javascript);
  REQUIRE(m.strings.size() == 3);
  CHECK(m.strings[0].text == "a ${b} ` c");
  CHECK(m.strings[1].text == "it's");
  CHECK(m.strings[2].text == "x\"y");
  CHECK(m.code.find(" b ") != std::string::npos);  // the code in ${...} is code
  CHECK(m.code.find('a') == std::string::npos);
}

TEST_CASE("JavaScript: the code in a template's ${...} is code, with its own strings, braces and templates",
          "[scan][lexer]") {
  const std::string text = "log(`sent ${db.insert({id: key, note: 'x}'})} via ${`${host}:${port}`} // not a comment`);\nafter()";
  const MaskedSource m = mask_source(text, Language::javascript);
  REQUIRE(m.code.size() == text.size());
  CHECK(m.code.find("db.insert({id: key, note: '") != std::string::npos);
  CHECK(m.code.find("host") != std::string::npos);
  CHECK(m.code.find("port") != std::string::npos);
  CHECK(m.code.find("sent") == std::string::npos);
  CHECK(m.code.find("comment") == std::string::npos);  // template text, not a comment
  CHECK(m.code.find("after()") != std::string::npos);
  REQUIRE_FALSE(m.strings.empty());
  CHECK(m.strings.front().text.rfind("sent ${db.insert(", 0) == 0);
  for (size_t k = 1; k < m.strings.size(); ++k) CHECK(m.strings[k - 1].begin <= m.strings[k].begin);  // in order
  CHECK(m.string_at(text.find("'x}'")) != nullptr);
}

TEST_CASE("JavaScript regular-expression literals are masked, division is code", "[scan][lexer]") {
  const std::string text =
      "const re = /it's \\/ [/\"] idempotencyKey/gi; if (/\"/.test(s)) save(x);\n"
      "const half = total / 2 / count; return /a'b/.exec(y) && retry(z);";
  const MaskedSource m = mask_source(text, Language::javascript);
  REQUIRE(m.code.size() == text.size());
  CHECK(m.code.find("idempotencyKey") == std::string::npos);
  CHECK(m.code.find("save(x)") != std::string::npos);      // the quote in /"/ opened no string
  CHECK(m.code.find("total / 2 / count") != std::string::npos);
  CHECK(m.code.find("retry(z)") != std::string::npos);     // nor did the one in /a'b/
  CHECK(m.strings.empty());
}

TEST_CASE("JavaScript: after an if, while or for condition a '/' opens a regex, after a call it divides",
          "[scan][lexer]") {
  const std::string text =
      "if (ok) /it's/.test(s) && save(x);\n"
      "while (f(a) > 0) /\"/.exec(y) || retry(z);\n"
      "const r = total(a) / count(b) / 2; const q = (a + b) / 2; send(r, q);";
  const MaskedSource m = mask_source(text, Language::javascript);
  REQUIRE(m.code.size() == text.size());
  CHECK(m.code.find("it's") == std::string::npos);       // the regex body is blanked
  CHECK(m.code.find("save(x)") != std::string::npos);    // its quote opened no string
  CHECK(m.code.find("retry(z)") != std::string::npos);   // nor did the one after while (...)
  CHECK(m.code.find("total(a) / count(b) / 2") != std::string::npos);
  CHECK(m.code.find("(a + b) / 2") != std::string::npos);
  CHECK(m.code.find("send(r, q)") != std::string::npos);
  CHECK(m.strings.empty());
}

TEST_CASE("Python: # comments, prefixed and triple-quoted strings", "[scan][lexer]") {
  const std::string text = "x = 1  # request_id\ndoc = r'''a 'quoted' \\d\n line'''\nf\"{dedupe_key}\"\n";
  const MaskedSource m = mask_source(text, Language::python);
  CHECK_FALSE(code_has(text, Language::python, "request_id"));
  CHECK_FALSE(code_has(text, Language::python, "dedupe_key"));
  REQUIRE(m.strings.size() == 2);
  CHECK(m.strings[0].text == "a 'quoted' \\d\n line");
  CHECK(text.substr(m.strings[0].begin, 4) == "r'''");  // the prefix belongs to the literal
  CHECK(m.strings[1].text == "{dedupe_key}");
  CHECK(m.line_of(m.strings[1].begin) == 4);
}

TEST_CASE("Go: raw strings with backticks, runes, line and block comments", "[scan][lexer]") {
  const std::string text = "s := `raw \\ idempotencyKey`; r := '\\''; // dedupe\nx := 1 /* a */ + 2";
  const MaskedSource m = mask_source(text, Language::go);
  CHECK_FALSE(code_has(text, Language::go, "idempotencyKey"));
  CHECK_FALSE(code_has(text, Language::go, "dedupe"));
  CHECK(code_has(text, Language::go, "x := 1"));
  REQUIRE(m.strings.size() == 2);
  CHECK(m.strings[0].text == "raw \\ idempotencyKey");
  CHECK(m.strings[1].text == "'");
}

TEST_CASE("Rust: lifetimes stay code, char and raw string literals are masked, block comments nest", "[scan][lexer]") {
  const std::string text = "fn f<'a>(x: &'a str) { let c = '\"'; let r = r#\"a \"b\" c\"#; } /* x /* y */ z */ g()";
  const MaskedSource m = mask_source(text, Language::rust);
  CHECK(m.code.find("fn f<'a>(x: &'a str)") == 0);
  REQUIRE(m.strings.size() == 2);
  CHECK(m.strings[0].text == "\"");
  CHECK(m.strings[1].text == "a \"b\" c");
  CHECK(m.code.find('z') == std::string::npos);
  CHECK(m.code.find("g()") != std::string::npos);
}

TEST_CASE("unterminated literals and comments run to the end without failing", "[scan][lexer]") {
  CHECK(mask_source("a = \"open", Language::javascript).strings.size() == 1);
  CHECK(code_of("x /* never closed", Language::go) == "x                ");
  CHECK(mask_source("s = '''open", Language::python).strings.at(0).text == "open");
}

TEST_CASE("languages by file extension", "[scan][lexer]") {
  CHECK(language_of_path("src/a.ts") == Language::javascript);
  CHECK(language_of_path("a.mjs") == Language::javascript);
  CHECK(language_of_path("a.py") == Language::python);
  CHECK(language_of_path("main.go") == Language::go);
  CHECK(language_of_path("lib.rs") == Language::rust);
  CHECK_FALSE(language_of_path("README.md"));
  CHECK_FALSE(language_of_path("Makefile"));
}

// Regression: `${ repeated 50,000 times (150 KB, under the 2 MiB file limit)
// recursed once per level and overflowed the stack.
TEST_CASE("template_nesting_too_deep: 50,000 nested templates stop at the bound, named, without recursing",
          "[scan][lexer]") {
  std::string text = "const a = 1;\n";
  for (int i = 0; i < 50000; ++i) text += "`${";
  const MaskedSource m = mask_source(text, Language::javascript);
  REQUIRE(m.unread_from);
  CHECK(*m.unread_from == 14 + 3 * kMaxTemplateNesting);  // the ${ one level too deep
  CHECK(m.line_of(*m.unread_from) == 2);
  CHECK(m.code.size() == text.size());
  CHECK(m.code.find("const a = 1;") == 0);
  CHECK(m.code.find('$', 14 + 3 * kMaxTemplateNesting) == std::string::npos);  // the rest is masked
}

TEST_CASE("templates nested to the bound are still read as code", "[scan][lexer]") {
  std::string text;
  for (int i = 0; i < kMaxTemplateNesting; ++i) text += "`${";
  text += "send(x)";
  for (int i = 0; i < kMaxTemplateNesting; ++i) text += "}`";
  const MaskedSource m = mask_source(text, Language::javascript);
  CHECK_FALSE(m.unread_from);
  CHECK(m.code.find("send(x)") != std::string::npos);
  CHECK(m.strings.size() == static_cast<size_t>(kMaxTemplateNesting));
}
