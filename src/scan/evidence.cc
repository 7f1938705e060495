#include "scan/evidence.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include "scan/structure.h"
#include "scan/words.h"

namespace effectfence::scan {
namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

bool has_any_word(const std::string& identifier, const std::set<std::string>& vocabulary) {
  for (const std::string& w : split_words(identifier)) {
    if (vocabulary.count(w)) return true;
  }
  return false;
}

// Receivers of .post(/.put(/.patch(/.delete( that are HTTP clients (a
// Map's .delete( is not a write outside the process).
const std::set<std::string> kHttpReceivers = {"axios", "http", "https", "client", "api", "request", "requests",
                                              "httpx", "session", "got", "ky", "agent", "rest", "superagent",
                                              "reqwest", "fetcher", "resty"};

// First words of SDK methods that act: stripe.charges.create(, sqs.sendMessage(.
const std::set<std::string> kSdkVerbs = {"create", "send", "submit", "insert", "charge", "capture", "publish",
                                         "enqueue", "transfer", "refund", "upsert", "pay", "payout", "dispatch"};

// Calls that change files.
const std::set<std::string> kFileCalls = {
    "writeFile", "writeFileSync", "appendFile", "appendFileSync", "unlink", "unlinkSync", "rename", "renameSync",
    "rm", "rmSync", "rmdir", "rmdirSync", "mkdir", "mkdirSync", "createWriteStream", "copyFile", "copyFileSync",
    "write_text", "write_bytes", "WriteFile", "Remove", "RemoveAll", "Rename", "Create", "Mkdir", "MkdirAll",
    "remove_file", "remove_dir_all", "create_dir_all"};

const std::regex& identifier_call() {
  static const std::regex pattern(R"(([A-Za-z_$][\w$]*)\s*(\.\s*([A-Za-z_$][\w$]*)\s*)?\()");
  return pattern;
}

void http_method_literals(const SourceFile& file, size_t index, std::vector<WriteSite>* out) {
  const auto& src = file.masked;
  for (const StringLiteral& literal : src.strings) {
    const std::string method = upper(literal.text);
    if (literal.text != method || (method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE")) {
      continue;
    }
    size_t k = literal.begin;
    while (k > 0 && std::isspace(static_cast<unsigned char>(src.code[k - 1]))) --k;
    if (k == 0) continue;
    const char before = src.code[k - 1];
    if (before != '(' && before != ',' && before != ':' && before != '=') continue;  // an argument or a value
    out->push_back(WriteSite{index, literal.begin, src.line_of(literal.begin), "http " + method,
                             file.text.substr(literal.begin, literal.end - literal.begin)});
  }
}

void sql_literals(const SourceFile& file, size_t index, std::vector<WriteSite>* out) {
  static const std::regex sql(R"(^\s*(INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+[\w."`]+\s+SET|DELETE\s+FROM|UPSERT|MERGE\s+INTO)\b)",
                              std::regex::icase);
  for (const StringLiteral& literal : file.masked.strings) {
    std::smatch m;
    if (!std::regex_search(literal.text, m, sql)) continue;
    const std::string verb = split_words(m[1].str()).front();
    out->push_back(WriteSite{index, literal.begin, file.masked.line_of(literal.begin), "sql " + verb,
                             literal.text.substr(0, std::min<size_t>(literal.text.size(), 60))});
  }
}

void code_calls(const SourceFile& file, size_t index, std::vector<WriteSite>* out) {
  const std::string& code = file.masked.code;
  static const std::regex go_rust_method(R"(\b(MethodPost|MethodPut|MethodPatch|MethodDelete)\b|\bMethod::(POST|PUT|PATCH|DELETE)\b)");
  for (std::sregex_iterator it(code.begin(), code.end(), go_rust_method), end; it != end; ++it) {
    const std::string method = (*it)[1].matched ? upper((*it)[1].str().substr(6)) : (*it)[2].str();
    const size_t at = static_cast<size_t>(it->position(0));
    out->push_back(WriteSite{index, at, file.masked.line_of(at), "http " + method, it->str()});
  }
  for (std::sregex_iterator it(code.begin(), code.end(), identifier_call()), end; it != end; ++it) {
    const size_t at = static_cast<size_t>(it->position(0));
    if (!word_starts_at(code, at)) continue;
    const std::string receiver = (*it)[3].matched ? (*it)[1].str() : "";
    const std::string method = (*it)[3].matched ? (*it)[3].str() : (*it)[1].str();
    const std::string lowered_method = split_words(method).empty() ? "" : split_words(method).front();
    std::string kind;
    if (!receiver.empty() && (method == "post" || method == "put" || method == "patch" || method == "delete" ||
                              method == "Post" || method == "PostForm") &&
        has_any_word(receiver, kHttpReceivers)) {
      kind = "http " + upper(method == "PostForm" ? "post" : method);
    } else if (kFileCalls.count(method) && (method.size() > 2 || !receiver.empty())) {
      kind = "file write";
    } else if (!receiver.empty() && kSdkVerbs.count(lowered_method)) {
      kind = "sdk " + lowered_method;
    }
    if (kind.empty()) continue;
    out->push_back(WriteSite{index, at, file.masked.line_of(at), kind, file.text.substr(at, it->length(0))});
  }
}

// [begin, end) of one retry in a file.
struct Span {
  size_t begin;
  size_t end;
  int line;
  std::string how;
};

bool names_retry_in(const std::string& code, size_t begin, size_t end, bool strict) {
  static const std::regex ident(R"([A-Za-z_$][\w$]*)");
  for (std::sregex_iterator it(code.begin() + static_cast<std::ptrdiff_t>(begin),
                               code.begin() + static_cast<std::ptrdiff_t>(end), ident),
       stop;
       it != stop; ++it) {
    const std::string name = it->str();
    if (strict ? has_any_word(name, {"retry", "retries", "retrying", "backoff"}) : names_retry(name)) return true;
  }
  return false;
}

std::vector<Span> retry_loops(const SourceFile& file) {
  const std::string& code = file.masked.code;
  std::vector<Span> spans;
  static const std::regex loop(R"(\b(for|while|loop|do)\b)");
  for (std::sregex_iterator it(code.begin(), code.end(), loop), end; it != end; ++it) {
    const size_t at = static_cast<size_t>(it->position(0));
    const size_t header_begin = at + static_cast<size_t>(it->length(0));
    size_t header_end, body_begin, body_end;
    if (file.language == Language::python) {
      if (it->str() == "loop" || it->str() == "do") continue;
      header_end = line_end(code, at);
      body_begin = header_end;
      body_end = python_block_end(code, at);
    } else {
      const size_t open = code.find('{', header_begin);
      if (open == std::string::npos) continue;
      header_end = open;
      body_begin = open;
      body_end = matching_close(code, open);
      if (it->str() == "do") header_end = line_end(code, body_end);  // the while (...) after the body
    }
    // The header speaks of attempts or retries; or the body counts retries.
    const bool about_retry = names_retry_in(code, header_begin, std::min(header_end, code.size()), false) ||
                             names_retry_in(code, body_begin, std::min(body_end, code.size()), true);
    if (about_retry) spans.push_back(Span{at, body_end, file.masked.line_of(at), "loop"});
  }
  // retry(...), withRetry(...), pRetry(...), backoff.retry(...) and @retry decorators.
  static const std::regex helper(R"((@\s*)?([A-Za-z_$][\w$.]*)\s*\()");
  for (std::sregex_iterator it(code.begin(), code.end(), helper), end; it != end; ++it) {
    const std::string name = (*it)[2].str();
    const size_t at = static_cast<size_t>(it->position(0));
    if (!word_starts_at(code, at) || !has_any_word(name, {"retry", "retrying", "retried"})) continue;
    if (name == "for" || name == "while") continue;
    const size_t open = static_cast<size_t>(it->position(0) + it->length(0) - 1);
    size_t span_end = matching_close(code, open);
    if ((*it)[1].matched && file.language == Language::python) {
      const size_t def = code.find("def ", span_end);
      if (def != std::string::npos) span_end = python_block_end(code, def);
    }
    spans.push_back(Span{at, span_end, file.masked.line_of(at), "retry helper"});
  }
  static const std::regex bare_decorator(R"(@\s*(?:[\w.]*\.)?retry\b(?!\s*\())");
  if (file.language == Language::python) {
    for (std::sregex_iterator it(code.begin(), code.end(), bare_decorator), end; it != end; ++it) {
      const size_t at = static_cast<size_t>(it->position(0));
      const size_t def = code.find("def ", at);
      if (def != std::string::npos) spans.push_back(Span{at, python_block_end(code, def), file.masked.line_of(at), "retry helper"});
    }
  }
  return spans;
}

}  // namespace

std::vector<WriteSite> find_writes(const SourceFile& file, size_t file_index) {
  std::vector<WriteSite> writes;
  http_method_literals(file, file_index, &writes);
  sql_literals(file, file_index, &writes);
  code_calls(file, file_index, &writes);
  std::sort(writes.begin(), writes.end(), [](const WriteSite& a, const WriteSite& b) { return a.offset < b.offset; });
  return writes;
}

std::vector<Guard> find_guards(const SourceFile& file, size_t file_index) {
  std::vector<Guard> guards;
  const std::string& code = file.masked.code;
  static const std::regex ident(R"([A-Za-z_$][\w$]*)");
  for (std::sregex_iterator it(code.begin(), code.end(), ident), end; it != end; ++it) {
    if (names_guard(it->str())) {
      const size_t at = static_cast<size_t>(it->position(0));
      guards.push_back(Guard{file_index, at, file.masked.line_of(at), it->str()});
    }
  }
  // A header name as a whole literal is code data ({"Idempotency-Key": key});
  // a sentence that mentions idempotency is not.
  static const std::regex header(R"(^(x-)?(idempotency|idempotent)[-_]?(key|token|id)$)", std::regex::icase);
  for (const StringLiteral& literal : file.masked.strings) {
    if (std::regex_match(literal.text, header)) {
      guards.push_back(Guard{file_index, literal.begin, file.masked.line_of(literal.begin), literal.text});
    }
  }
  std::sort(guards.begin(), guards.end(), [](const Guard& a, const Guard& b) { return a.offset < b.offset; });
  return guards;
}

std::vector<RetryAroundWrite> find_retries_around_writes(const SourceFile& file, size_t file_index,
                                                         const std::vector<WriteSite>& writes_in_file,
                                                         const std::vector<Guard>& guards_in_file) {
  std::vector<RetryAroundWrite> found;
  std::set<size_t> reported;  // one finding per retry start
  for (const Span& span : retry_loops(file)) {
    for (const WriteSite& write : writes_in_file) {
      if (write.offset <= span.begin || write.offset >= span.end || !reported.insert(span.begin).second) continue;
      bool guarded = false;
      for (const Guard& guard : guards_in_file) guarded = guarded || (guard.offset > span.begin && guard.offset < span.end);
      found.push_back(RetryAroundWrite{file_index, span.line, span.how, write, guarded});
    }
  }
  std::sort(found.begin(), found.end(), [](const RetryAroundWrite& a, const RetryAroundWrite& b) { return a.line < b.line; });
  return found;
}

Evidence collect_evidence(const SourceTree& tree) {
  Evidence evidence;
  for (size_t i = 0; i < tree.files.size(); ++i) {
    auto writes = find_writes(tree.files[i], i);
    auto guards = find_guards(tree.files[i], i);
    auto retries = find_retries_around_writes(tree.files[i], i, writes, guards);
    evidence.writes.insert(evidence.writes.end(), writes.begin(), writes.end());
    evidence.guards.insert(evidence.guards.end(), guards.begin(), guards.end());
    evidence.retries.insert(evidence.retries.end(), retries.begin(), retries.end());
  }
  return evidence;
}

}  // namespace effectfence::scan
