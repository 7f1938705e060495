// effectfence: entry point; dispatches to one function per subcommand.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/commands.h"
#include "cli/version.h"
#include "ledger/sqlite_ledger.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(const effectfence::cli::Args&);
  const char* summary;
  bool changes_ledger = false;  // what it did stands even if its report is lost
};

const Subcommand kSubcommands[] = {
    {"serve", effectfence::cli::run_serve, "stdio MCP server with the fence_* tools", true},
    {"wrap", effectfence::cli::run_wrap, "fence an existing MCP server: every tool call runs once", true},
    {"demo", effectfence::cli::run_demo, "see the fence stop a double charge"},
    {"demo-server", effectfence::cli::run_demo_server, "a toy payment provider (MCP stdio) that double-charges"},
    {"probe", effectfence::cli::run_probe, "prove whether an MCP server fires one action twice"},
    {"scan", effectfence::cli::run_scan, "find the tools of a server that could fire an effect twice"},
    {"stats", effectfence::cli::run_stats, "counters of a ledger"},
    {"fenced", effectfence::cli::run_fenced, "list fenced intents (failed/unknown) and why"},
    {"clear", effectfence::cli::run_clear, "audited clear of a fenced intent", true},
    {"export", effectfence::cli::run_export, "audit dump of certificates and events"},
    {"verify", effectfence::cli::run_verify, "recompute every certificate hash and chain, check signatures"},
    {"keygen", effectfence::cli::run_keygen, "write an Ed25519 key pair for signing certificates"},
    {"archive", effectfence::cli::run_archive, "move old history out of the ledger into signed segment files", true},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "effectfence %s: make side-effecting agent tool calls run exactly once\n\n"
               "usage: effectfence <command> [options]   (effectfence <command> --help)\n\n"
               "commands:\n",
               effectfence::cli::kVersion);
  for (const auto& s : kSubcommands) std::fprintf(out, "  %-12s %s\n", s.name, s.summary);
  std::fprintf(out,
               "\nenvironment: EFFECTFENCE_LEDGER, EFFECTFENCE_LEASE_SECS (60), "
               "EFFECTFENCE_RESULT_TTL_SECS (86400), EFFECTFENCE_SWEEP_INTERVAL_SECS (600),\n"
               "EFFECTFENCE_SIGNING_KEY (none)\n");
}

// A report that could not be written (a full disk behind `> report.txt`)
// is a failure, whatever the command did: its caller would read nothing.
int output_written(const char* command, int exit_code, bool changes_ledger) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return exit_code;
  const char* why = effectfence::cli::stdout_closed_at_start() ? effectfence::cli::kStdoutClosed : std::strerror(errno);
  std::fprintf(stderr, "effectfence %s: writing to standard output: %s%s\n", command, why,
               exit_code == 0 && changes_ledger ? " (what the command did in the ledger is done regardless)" : "");
  return exit_code == 0 ? 2 : exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  effectfence::cli::hold_closed_standard_streams();  // before anything opens a file
  effectfence::configure_sqlite_for_process();
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return output_written("--help", 0, false);
  }
  if (name == "--version" || name == "version") {
    std::printf("effectfence %s (commit %s)\n", effectfence::cli::kVersion, effectfence::cli::kBuildCommit);
    return output_written("--version", 0, false);
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& s : kSubcommands) {
    if (name == s.name) {
      const int exit_code = effectfence::cli::check_reads_in_place(s.name, s.run(args));
      return output_written(s.name, exit_code, s.changes_ledger);
    }
  }
  std::fprintf(stderr, "effectfence: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
