// effectfence stats: the ledger-wide counters, from every process that ever
// used the ledger, plus how many intents sit in each state.
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/commands.h"
#include "ledger/audit_reads.h"
#include "effectfence/fence.h"
#include "effectfence/state_machine.h"
#include "effectfence/types.h"
#include "mcp/prometheus.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "stats";

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence stats [--db PATH] [--json | --prometheus]\n\n"
               "Prints the ledger-wide counters (every process, for the life of the file):\n"
               "attempts, how many were prevented from running twice, commits and aborts,\n"
               "and how many intents are in each state. Opens the ledger read-only.\n\n"
               "options:\n"
               "  --db PATH  ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --json     one JSON object: {path, ledger: {admitted, replayed, refused: {...},\n"
               "             total_attempts, prevented, committed, aborted}, intents: {state: n},\n"
               "             certificates, events}\n"
               "  --prometheus  the same in the Prometheus text format (0.0.4), every sample\n"
               "             labelled ledger=\"PATH\": for node_exporter's textfile collector\n"
               "  --help     this text\n",
               Settings::default_ledger_path("server").c_str());
}

void print_json(const std::string& path, const LedgerCounts& s) {
  Json intents = Json::object();
  for (const auto& [state, n] : s.intents) intents[state] = n;
  const Json out = {{"path", path},
                    {"ledger", s.counters.to_json()},
                    {"intents", intents},
                    {"certificates", s.certificates},
                    {"events", s.events}};
  print_json_line(out);
}

// Refusal reasons the ledger counts, as Counters holds them.
std::vector<std::pair<const char*, int64_t>> refusals_by_reason(const Counters& c) {
  return {{"stale_read_set", c.refused_stale_read_set},
          {"domain_race", c.refused_domain_race},
          {"in_flight", c.refused_in_flight},
          {"prior_failure", c.refused_prior_failure},
          {"payload_mismatch", c.refused_payload_mismatch}};
}

// The ledger-wide numbers, named effectfence_ledger_* so they never add up
// with a server's own effectfence_* counts of the same decisions.
std::string prometheus_text(const std::string& path, const LedgerCounts& s) {
  using Type = mcp::PrometheusText::Type;
  const Counters& c = s.counters;
  const mcp::PrometheusLabels ledger = {{"ledger", path}};
  mcp::PrometheusText out;
  auto one = [&](const char* name, Type type, const char* help, int64_t value) {
    out.family(name, type, help);
    out.sample(name, ledger, value);
  };
  one("effectfence_ledger_admissions_total", Type::counter,
      "Attempts admitted to run their effect, by every process, for the life of the ledger", c.admitted);
  one("effectfence_ledger_replays_total", Type::counter,
      "Duplicate attempts handed the recorded result instead of running again", c.replayed);
  out.family("effectfence_ledger_refusals_total", Type::counter,
             "Attempts refused before their effect ran, by reason");
  for (const auto& [reason, n] : refusals_by_reason(c)) {
    out.sample("effectfence_ledger_refusals_total", {{"ledger", path}, {"reason", reason}}, n);
  }
  one("effectfence_ledger_prevented_total", Type::counter,
      "Attempts that did not run the effect: replays plus refusals", c.prevented());
  one("effectfence_ledger_commits_total", Type::counter, "Effects whose result was recorded with a certificate",
      c.committed);
  one("effectfence_ledger_aborts_total", Type::counter, "Attempts aborted: their intent fenced as failed", c.aborted);
  out.family("effectfence_ledger_intents", Type::gauge,
             "Intents in the ledger now, by state; failed and unknown are fenced until an operator clears them");
  for (IntentState stored : kStoredStates) {
    const char* state = state_name(stored);
    out.sample("effectfence_ledger_intents", {{"ledger", path}, {"state", state}}, s.intents.at(state));
  }
  one("effectfence_ledger_certificates", Type::gauge, "Certificates in the ledger (kept for audit)", s.certificates);
  one("effectfence_ledger_events", Type::gauge, "Rows in the ledger's audit log (events)", s.events);
  return out.take();
}

void print_text(const std::string& path, const LedgerCounts& s) {
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
  for (IntentState stored : kStoredStates) {
    const char* state = state_name(stored);
    std::printf(" %s %lld", state, static_cast<long long>(s.intents.at(state)));
  }
  std::printf("\n");
  std::printf("certificates  %lld\n", static_cast<long long>(s.certificates));
  std::printf("events        %lld\n", static_cast<long long>(s.events));
}

int stats(const ParsedArgs& parsed) {
  if (parsed.has("json") && parsed.has("prometheus")) {
    print_error(kCommand, "reading options", "--json and --prometheus are two formats of one report: give one");
    return kExitFailure;
  }
  auto opened = open_ledger_reader(resolve_ledger_path(parsed, kCommand));
  if (!opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  std::unique_ptr<LedgerReader> db = std::move(*opened);
  LedgerCounts s;
  try {
    s = read_counts(*db);
  } catch (const std::exception& e) {
    print_error(kCommand, "reading the counters", e.what());
    return kExitFailure;
  }
  if (parsed.has("prometheus")) {
    std::fputs(prometheus_text(db->name(), s).c_str(), stdout);
  } else if (parsed.has("json")) {
    print_json(db->name(), s);
  } else {
    print_text(db->name(), s);
  }
  return kExitOk;
}

}  // namespace

int run_stats(const Args& args) {
  return run_command({kCommand, {{"db", true}, {"json", false}, {"prometheus", false}}, print_usage}, args, stats);
}

}  // namespace effectfence::cli
