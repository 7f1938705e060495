#include "ledger/intent_sql.h"

#include <stdexcept>
#include <vector>

namespace effectfence::intent_sql {
namespace {

const std::vector<std::string>& column_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    std::string all = kColumns;
    size_t begin = 0;
    while (begin < all.size()) {
      size_t end = all.find(',', begin);
      if (end == std::string::npos) end = all.size();
      std::string name = all.substr(begin, end - begin);
      name.erase(0, name.find_first_not_of(' '));
      out.push_back(name);
      begin = end + 1;
    }
    return out;
  }();
  return names;
}

// "$1,$2,..." or "?1,?2,...": one numbered parameter per column.
std::string numbered_placeholders(char sigil) {
  std::string out;
  for (size_t i = 0; i < column_names().size(); ++i) out += (i > 0 ? "," : "") + (sigil + std::to_string(i + 1));
  return out;
}

}  // namespace

const char* const kColumns =
    "intent, state, domain, tool, args, payload_hash, agent, seq, generation, token, read_set, "
    "parent, known_clock, holder_host, holder_boot, holder_pid, holder_started, "
    "lease_expires_at, admitted_at, updated_at, cert_hash, reason";

std::string upsert() {
  std::string updates;
  for (const std::string& name : column_names()) {
    if (name == "intent") continue;  // the conflict key
    updates += name + "=excluded." + name + ", ";
  }
  return std::string("INSERT INTO intents (") + kColumns + ") VALUES (" + numbered_placeholders('$') +
         ") ON CONFLICT (intent) DO UPDATE SET " + updates + "version=intents.version + 1";
}

std::string update_row() {
  const auto& names = column_names();
  std::string sets;
  for (size_t i = 1; i < names.size(); ++i) sets += names[i] + "=?" + std::to_string(i + 1) + ", ";
  return "UPDATE intents SET " + sets + "version=version + 1 WHERE intent=?1";
}

std::string insert_row(char sigil) {
  return std::string("INSERT INTO intents (") + kColumns + ") VALUES (" + numbered_placeholders(sigil) + ")";
}

std::string outcome_update(char sigil) {
  const std::string p(1, sigil);
  return "UPDATE intents SET state = " + p + "2, cert_hash = " + p + "3, reason = " + p + "4, updated_at = " + p +
         "5, version = version + 1 WHERE intent = " + p + "1";
}

std::string stored_read_set(const std::vector<ReadSetEntry>& read_set) {
  return read_set.empty() ? "[]" : canonicalize(read_set_to_json(read_set));
}

std::string stored_clock(const VectorClock& clock) {
  return clock.counters().empty() ? "{}" : canonicalize(clock.to_json());
}

Json parse_stored(const std::string& text, const char* column) {
  // What most rows hold: no read-set, no clock.
  if (text == "[]") return Json::array();
  if (text == "{}") return Json::object();
  JsonError error;
  auto value = parse_strict(text, &error, WideIntegers::as_doubles);
  if (!value) throw std::runtime_error(std::string("ledger holds malformed ") + column + ": " + error.message);
  return *value;
}

}  // namespace effectfence::intent_sql
