#include "scan/words.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace effectfence::scan {
namespace {

bool lower(char c) { return std::islower(static_cast<unsigned char>(c)) != 0; }
bool upper(char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; }
bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Inflected forms listed out: a stemmer would also turn "listing" and
// "lists" into one another, which is fine, but "address" into "addres" too.
const std::set<std::string> kEffectWords = {
    "create", "creates", "creating", "send", "sends", "sending", "submit", "submits", "charge", "charges",
    "charging", "pay", "pays", "payment", "payments", "payout", "payouts", "refund", "refunds", "transfer",
    "transfers", "write", "writes", "writing", "delete", "deletes", "deleting", "remove", "removes", "update",
    "updates", "updating", "edit", "edits", "insert", "inserts", "post", "posts", "publish", "publishes",
    "deploy", "deploys", "purchase", "purchases", "buy", "move", "moves",
    "rename", "renames", "execute", "executes", "add", "adds", "append", "appends", "upload",
    "uploads", "email", "emails", "notify", "notifies", "invoice", "invoices", "cancel", "cancels", "approve",
    "approves", "mark", "marks", "place", "places", "modify", "modifies", "overwrite", "overwrites", "register",
    "registers", "schedule", "schedules", "trigger", "triggers", "provision", "provisions", "scale", "restart",
    "merge", "merges", "commit", "commits", "push", "pushes", "record", "records", "store", "stores", "save",
    "saves", "mint", "mints", "reserve", "reserves", "enqueue", "enqueues", "drop", "drops"};

const std::set<std::string> kReadWords = {
    "read", "reads", "reading", "get", "gets", "list", "lists", "listing", "search", "searches", "find", "finds",
    "fetch", "fetches", "show", "shows", "view", "views", "query", "queries", "lookup", "describe", "describes",
    "inspect", "inspects", "check", "checks", "status", "count", "counts", "preview", "previews", "look",
    "looks", "retrieve", "retrieves", "return", "returns", "display", "displays", "browse", "info", "tree"};

std::vector<std::string> distinct_in(std::string_view text, const std::set<std::string>& vocabulary) {
  std::vector<std::string> found;
  for (const std::string& word : split_words(text)) {
    if (vocabulary.count(word) && std::find(found.begin(), found.end(), word) == found.end()) found.push_back(word);
  }
  return found;
}

bool has_word(const std::vector<std::string>& words, std::initializer_list<const char*> any) {
  for (const std::string& w : words) {
    for (const char* a : any) {
      if (w == a) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  auto flush = [&] {
    if (!current.empty()) words.push_back(current);
    current.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!alpha(c) && !digit(c)) {
      flush();
      continue;
    }
    if (!current.empty()) {
      const char prev = text[i - 1];
      const bool lower_to_upper = upper(c) && (lower(prev) || digit(prev));
      // The last capital of a run starts a new word: HTTPClient -> HTTP Client.
      const bool run_ends = upper(c) && upper(prev) && i + 1 < text.size() && lower(text[i + 1]);
      if (lower_to_upper || run_ends) flush();
    }
    current += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  flush();
  return words;
}

std::vector<std::string> effect_words(std::string_view text) { return distinct_in(text, kEffectWords); }
std::vector<std::string> read_words(std::string_view text) { return distinct_in(text, kReadWords); }

std::string leading_word(std::string_view name, std::string_view description) {
  for (std::string_view text : {name, description}) {
    for (const std::string& word : split_words(text)) {
      if (kEffectWords.count(word) || kReadWords.count(word)) return word;
    }
  }
  return "";
}

bool is_read_word(const std::string& word) { return kReadWords.count(word) > 0; }

bool names_guard(std::string_view identifier) {
  const auto words = split_words(identifier);
  // idempotentHint declares a tool's nature to clients; it guards nothing.
  if (has_word(words, {"hint"})) return false;
  if (has_word(words, {"idempotency", "idempotent", "idempotence", "dedupe", "dedup", "deduplicate",
                       "deduplication", "deduplicated"})) {
    return true;
  }
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "request" && words[i + 1] == "id") return true;
  }
  return false;
}

bool names_retry(std::string_view identifier) {
  return has_word(split_words(identifier), {"retry", "retries", "retrying", "attempt", "attempts", "backoff", "tries"});
}

}  // namespace effectfence::scan
