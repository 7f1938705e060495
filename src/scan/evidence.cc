#include "scan/evidence.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <string_view>
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

// Receivers of .post(/.put(/.patch(/.delete( that are HTTP clients, by
// their last word (apiClient, this.http, session) or their first
// (axiosInstance); a Map's .delete( is not a write outside the process,
// even when the map is called _requestToStreamMapping.
const std::set<std::string> kHttpLastWords = {"axios", "http", "https", "client", "api", "requests", "httpx",
                                              "session", "got", "ky", "agent", "rest", "superagent", "reqwest",
                                              "fetcher", "resty"};
const std::set<std::string> kHttpFirstWords = {"axios", "http", "https", "httpx", "reqwest", "got", "ky",
                                               "superagent", "requests", "api"};

bool is_http_client(const std::string& receiver) {
  const auto words = split_words(receiver);
  return !words.empty() && (kHttpLastWords.count(words.back()) || kHttpFirstWords.count(words.front()));
}

// First words of SDK methods that act: stripe.charges.create(, sqs.sendMessage(.
// (Not enqueue or dispatch: stream controllers and UI stores use them in-process.)
const std::set<std::string> kSdkVerbs = {"create", "send", "submit", "insert", "charge", "capture", "publish",
                                         "transfer", "refund", "upsert", "pay", "payout"};

// Calls that change files.
const std::set<std::string> kFileCalls = {
    "writeFile", "writeFileSync", "appendFile", "appendFileSync", "unlink", "unlinkSync", "rename", "renameSync",
    "rm", "rmSync", "rmdir", "rmdirSync", "mkdir", "mkdirSync", "createWriteStream", "copyFile", "copyFileSync",
    "write_text", "write_bytes", "WriteFile", "Remove", "RemoveAll", "Rename", "Create", "Mkdir", "MkdirAll",
    "remove_file", "remove_dir_all", "create_dir_all"};

// Calls named like effects that stay in the process: sends that answer or
// inform the caller (res.send, MCP notifications, logging, progress), and
// creates that build a local object.
bool protocol_chatter(const std::string& receiver, const std::vector<std::string>& method_words) {
  static const std::set<std::string> kReplies = {"res", "resp", "response", "reply", "ctx"};
  // create...( that builds something in the process: crypto.createHash(,
  // http.createServer(, document.createElement(, Object.create(.
  static const std::set<std::string> kLocalReceivers = {"Object", "document", "React", "crypto", "readline", "Symbol",
                                                        "Array", "Promise", "Reflect", "URL", "path", "os", "util",
                                                        "events", "stream", "zlib", "vm", "worker"};
  static const std::set<std::string> kLocalThings = {
      "hash", "hmac", "server", "element", "context", "client", "interface", "cipheriv", "decipheriv", "sign",
      "verify", "logger", "router", "app", "transport", "reader", "read", "text", "node", "object", "ref", "store",
      "slice", "selector", "schema", "connection", "pool", "agent", "require", "socket", "instance", "parser",
      "worker", "channel", "signal", "portal", "root", "memo", "effect", "state", "error"};
  if (!method_words.empty() && method_words.front() == "create") {
    if (kLocalReceivers.count(receiver)) return true;
    for (size_t i = 1; i < method_words.size(); ++i) {
      if (kLocalThings.count(method_words[i])) return true;
    }
  }
  static const std::set<std::string> kChatter = {"notification", "logging", "log", "progress", "ping", "response", "changed"};
  if (kReplies.count(receiver)) return true;
  for (const auto& w : method_words) {
    if (kChatter.count(w)) return true;
  }
  return false;
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
    // Shown with its key when it has one: method: "POST".
    std::string shown = file.text.substr(literal.begin, literal.end - literal.begin);
    if (before == ':' || before == '=') {
      const std::string_view key = identifier_before(src.code, k - 1);
      if (!key.empty()) shown = std::string(key) + std::string(1, before) + " " + shown;
    }
    out->push_back(WriteSite{index, literal.begin, src.line_of(literal.begin), "http " + method, shown});
  }
}

void sql_literals(const SourceFile& file, size_t index, std::vector<WriteSite>* out) {
  static const std::regex sql(R"(^(INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+[\w."`]+\s+SET|DELETE\s+FROM|UPSERT|MERGE\s+INTO)\b)",
                              std::regex::icase);
  for (const StringLiteral& literal : file.masked.strings) {
    // Only the statement's opening words matter; a bounded prefix keeps
    // std::regex (recursive in libstdc++) away from huge literals.
    const size_t first = literal.text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) continue;
    const std::string head = literal.text.substr(first, 200);
    std::smatch m;
    if (!std::regex_search(head, m, sql)) continue;
    const std::string verb = split_words(m[1].str()).front();
    out->push_back(WriteSite{index, literal.begin, file.masked.line_of(literal.begin), "sql " + verb,
                             literal.text.substr(0, std::min<size_t>(literal.text.size(), 60))});
  }
}

void code_calls(const SourceFile& file, size_t index, const std::vector<IdentifierUse>& uses, std::vector<WriteSite>* out) {
  const std::string& code = file.masked.code;
  for (size_t i = 0; i < uses.size(); ++i) {
    const IdentifierUse& use = uses[i];
    const std::string method(use.name);
    const size_t line = file.masked.line_of(use.at);
    // Go's http.MethodPost, Rust's Method::POST.
    if (method == "MethodPost" || method == "MethodPut" || method == "MethodPatch" || method == "MethodDelete") {
      out->push_back(WriteSite{index, use.at, static_cast<int>(line), "http " + upper(method.substr(6)), method});
      continue;
    }
    if ((method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE") && i > 0 &&
        uses[i - 1].name == "Method" && code.compare(skip_back_space(code, use.at) - 2, 2, "::") == 0) {
      out->push_back(WriteSite{index, use.at, static_cast<int>(line), "http " + method, "Method::" + method});
      continue;
    }
    if (use.open == std::string::npos) continue;
    const std::string receiver(use.receiver);
    const auto words = split_words(method);
    const std::string first_word = words.empty() ? "" : words.front();
    std::string kind;
    if (!receiver.empty() && (method == "post" || method == "put" || method == "patch" || method == "delete" ||
                              method == "Post" || method == "PostForm") &&
        is_http_client(receiver)) {
      kind = "http " + upper(method == "PostForm" ? "post" : method);
    } else if (kFileCalls.count(method) && (method.size() > 2 || !receiver.empty())) {
      kind = "file write";
    } else if (!receiver.empty() && method[0] != '_' && kSdkVerbs.count(first_word) &&
               !protocol_chatter(receiver, words)) {  // _private helpers build, they do not call out
      kind = "sdk " + first_word;
    }
    if (kind.empty()) continue;
    const size_t from = receiver.empty() ? use.at : static_cast<size_t>(use.receiver.data() - code.data());
    out->push_back(WriteSite{index, from, static_cast<int>(line), kind, file.text.substr(from, use.open + 1 - from)});
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
  bool found = false;
  for_each_identifier(code, begin, end, [&](size_t, std::string_view name) {
    if (found) return;
    found = strict ? has_any_word(std::string(name), {"retry", "retries", "retrying", "backoff"}) : names_retry(name);
  });
  return found;
}

std::vector<Span> retry_loops(const SourceFile& file, const std::vector<IdentifierUse>& uses) {
  const std::string& code = file.masked.code;
  const bool python = file.language == Language::python;
  std::vector<Span> spans;
  for (const IdentifierUse& use : uses) {
    const std::string name(use.name);
    const bool loop_word = name == "for" || name == "while" || (!python && (name == "loop" || name == "do"));
    if (loop_word && use.receiver.empty()) {
      const size_t header_begin = use.at + name.size();
      size_t header_end, body_begin, body_end;
      if (python) {
        header_end = line_end(code, use.at);
        body_begin = header_end;
        body_end = python_block_end(code, use.at);
      } else {
        const size_t open = code.find('{', header_begin);
        if (open == std::string::npos) continue;
        header_end = open;
        body_begin = open;
        body_end = matching_close(file.masked, open);
        if (name == "do") header_end = line_end(code, body_end);  // the while (...) after the body
      }
      // The header speaks of attempts or retries; or the body counts retries.
      if (names_retry_in(code, header_begin, header_end, false) || names_retry_in(code, body_begin, body_end, true)) {
        spans.push_back(Span{use.at, body_end, file.masked.line_of(use.at), "loop"});
      }
      continue;
    }
    // retry(...), withRetry(...), pRetry(...), backoff.retry(...), @retry(...), @retry.
    if (!has_any_word(name, {"retry", "retrying", "retried"})) continue;
    if (use.open == std::string::npos && !(python && use.decorator)) continue;
    size_t span_end = use.open == std::string::npos ? use.at : matching_close(file.masked, use.open);
    if (use.decorator && python) {
      const size_t def = code.find("def ", span_end);
      if (def == std::string::npos) continue;
      span_end = python_block_end(code, def);
    }
    spans.push_back(Span{use.chain_start, span_end, file.masked.line_of(use.chain_start), "retry helper"});
  }
  return spans;
}

}  // namespace

std::vector<WriteSite> find_writes(const SourceFile& file, size_t file_index) {
  std::vector<WriteSite> writes;
  http_method_literals(file, file_index, &writes);
  sql_literals(file, file_index, &writes);
  code_calls(file, file_index, identifier_uses(file.masked.code), &writes);
  std::sort(writes.begin(), writes.end(), [](const WriteSite& a, const WriteSite& b) { return a.offset < b.offset; });
  return writes;
}

std::vector<Guard> find_guards(const SourceFile& file, size_t file_index) {
  std::vector<Guard> guards;
  const std::string& code = file.masked.code;
  for_each_identifier(code, 0, code.size(), [&](size_t at, std::string_view name) {
    if (names_guard(name)) guards.push_back(Guard{file_index, at, file.masked.line_of(at), std::string(name)});
  });
  // A header name as a whole literal is code data ({"Idempotency-Key": key});
  // a sentence that mentions idempotency is not.
  static const std::regex header(R"(^(x-)?(idempotency|idempotent)[-_]?(key|token|id)$)", std::regex::icase);
  for (const StringLiteral& literal : file.masked.strings) {
    if (literal.text.size() <= 40 && std::regex_match(literal.text, header)) {
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
  for (const Span& span : retry_loops(file, identifier_uses(file.masked.code))) {
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
