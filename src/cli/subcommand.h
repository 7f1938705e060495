// What every subcommand shares: exit codes, named errors, and the skeleton
// that reads its options before it runs.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "effectfence/ledger.h"

namespace effectfence::cli {

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitProblems = 1;  // verify found tampering or a broken chain
constexpr int kExitFailure = 2;   // usage error, or the command could not run

// Prints "effectfence COMMAND: STEP: MESSAGE" on stderr, so every error
// names the step that failed.
void print_error(const std::string& command, const std::string& step, const std::string& message);

// Runs body and turns any exception escaping it into a named error and
// kExitFailure: a subcommand never dies with an uncaught exception.
int run_guarded(const std::string& command, const std::function<int()>& body);

// A subcommand's shape: its name, its options, its help, and how many
// positional arguments it takes (what they are, for the error).
struct CommandSpec {
  const char* name;
  std::vector<OptionSpec> options;
  void (*print_usage)(std::FILE* out);
  size_t positionals = 0;
  const char* positional_names = nullptr;  // e.g. "one INTENT"
};

// The skeleton every operator subcommand runs in: reads args against spec
// (an error names the option; --help prints the usage and exits 0; a
// positional argument too many or too few is refused), then runs body,
// guarded as run_guarded does.
int run_command(const CommandSpec& spec, const Args& args, const std::function<int(const ParsedArgs&)>& body);

// An error opening the ledger as the CLI prints it: its code and message,
// and the way to choose another ledger or check this one, which only the
// CLI can name (--db, EFFECTFENCE_LEDGER, effectfence verify).
std::string open_error_text(const OpenError& error);

// Run in main once a command is done: exit_code, or a failure with a named
// error if a ledger read in place on a read-only mount changed meanwhile.
int check_reads_in_place(const char* command, int exit_code);

}  // namespace effectfence::cli
