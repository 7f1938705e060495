// effectfence stats: the ledger-wide counters, from every process that ever
// used the ledger, plus how many intents sit in each state.
#include <cstdio>
#include <map>
#include <string>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/ledger_reader.h"
#include "effectfence/fence.h"
#include "effectfence/types.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "stats";
constexpr const char* kStates[] = {"in_flight", "done", "failed", "unknown", "cleared"};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence stats [--db PATH] [--json]\n\n"
               "Prints the ledger-wide counters (every process, for the life of the file):\n"
               "attempts, how many were prevented from running twice, commits and aborts,\n"
               "and how many intents are in each state. Opens the ledger read-only.\n\n"
               "options:\n"
               "  --db PATH  ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --json     one JSON object: {path, ledger: {admitted, replayed, refused: {...},\n"
               "             total_attempts, prevented, committed, aborted}, intents: {state: n},\n"
               "             certificates, events}\n"
               "  --help     this text\n",
               Settings::default_ledger_path("server").c_str());
}

struct LedgerStats {
  Counters counters;
  std::map<std::string, int64_t> intents;  // state -> how many
  int64_t certificates = 0;
  int64_t events = 0;
};

// Unknown counter names (from a newer writer) are ignored, not fatal.
void set_counter(Counters* c, const std::string& name, int64_t value) {
  std::map<std::string, int64_t*> slots = {
      {"admitted", &c->admitted},
      {"replayed", &c->replayed},
      {"refused_stale_read_set", &c->refused_stale_read_set},
      {"refused_domain_race", &c->refused_domain_race},
      {"refused_in_flight", &c->refused_in_flight},
      {"refused_prior_failure", &c->refused_prior_failure},
      {"refused_payload_mismatch", &c->refused_payload_mismatch},
      {"committed", &c->committed},
      {"aborted", &c->aborted},
  };
  auto slot = slots.find(name);
  if (slot != slots.end()) *slot->second = value;
}

LedgerStats read_stats(LedgerReader& db) {
  LedgerStats stats;
  auto counters = db.query("SELECT name, value FROM counters");
  while (counters->next()) set_counter(&stats.counters, counters->text(0), counters->integer(1));
  for (const char* state : kStates) stats.intents[state] = 0;
  auto states = db.query("SELECT state, count(*) FROM intents GROUP BY state");
  while (states->next()) stats.intents[states->text(0)] = states->integer(1);
  stats.certificates = db.integer("SELECT count(*) FROM certificates");
  stats.events = db.integer("SELECT count(*) FROM events");
  return stats;
}

void print_json(const std::string& path, const LedgerStats& s) {
  Json intents = Json::object();
  for (const auto& [state, n] : s.intents) intents[state] = n;
  const Json out = {{"path", path},
                    {"ledger", s.counters.to_json()},
                    {"intents", intents},
                    {"certificates", s.certificates},
                    {"events", s.events}};
  print_json_line(out);
}

void print_text(const std::string& path, const LedgerStats& s) {
  const Counters& c = s.counters;
  std::printf("ledger        %s\n", path.c_str());
  std::printf("attempts      %lld (admitted %lld, replayed %lld, refused %lld)\n",
              static_cast<long long>(c.total_attempts()), static_cast<long long>(c.admitted),
              static_cast<long long>(c.replayed), static_cast<long long>(c.refusals()));
  std::printf("prevented     %lld (replayed or refused: the effect did not run again)\n",
              static_cast<long long>(c.prevented()));
  std::printf("refused       stale_read_set %lld, domain_race %lld, in_flight %lld, prior_failure %lld, "
              "payload_mismatch %lld\n",
              static_cast<long long>(c.refused_stale_read_set), static_cast<long long>(c.refused_domain_race),
              static_cast<long long>(c.refused_in_flight), static_cast<long long>(c.refused_prior_failure),
              static_cast<long long>(c.refused_payload_mismatch));
  std::printf("committed     %lld\n", static_cast<long long>(c.committed));
  std::printf("aborted       %lld\n", static_cast<long long>(c.aborted));
  std::printf("intents      ");
  for (const char* state : kStates) {
    std::printf(" %s %lld", state, static_cast<long long>(s.intents.at(state)));
  }
  std::printf("\n");
  std::printf("certificates  %lld\n", static_cast<long long>(s.certificates));
  std::printf("events        %lld\n", static_cast<long long>(s.events));
}

int stats(const Args& args) {
  std::string error;
  auto parsed = parse_args(args, {{"db", true}, {"json", false}}, &error);
  if (!parsed) {
    print_error(kCommand, "reading options", error);
    return kExitFailure;
  }
  if (parsed->has("help")) {
    print_usage(stdout);
    return kExitOk;
  }
  if (!parsed->positionals.empty()) {
    print_error(kCommand, "reading options", "unexpected argument '" + parsed->positionals[0] + "'");
    return kExitFailure;
  }
  auto db = open_ledger_reader(resolve_ledger_path(*parsed, kCommand), &error);
  if (!db) {
    print_error(kCommand, "opening the ledger", error);
    return kExitFailure;
  }
  LedgerStats s;
  try {
    s = read_stats(*db);
  } catch (const std::exception& e) {
    print_error(kCommand, "reading the counters", e.what());
    return kExitFailure;
  }
  if (parsed->has("json")) {
    print_json(db->name(), s);
  } else {
    print_text(db->name(), s);
  }
  return kExitOk;
}

}  // namespace

int run_stats(const Args& args) {
  return run_guarded(kCommand, [&] { return stats(args); });
}

}  // namespace effectfence::cli
