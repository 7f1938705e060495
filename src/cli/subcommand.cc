#include "cli/subcommand.h"

#include <exception>

#include <SQLiteCpp/SQLiteCpp.h>

#include "ledger/read_only.h"

namespace effectfence::cli {

void print_error(const std::string& command, const std::string& step, const std::string& message) {
  std::fprintf(stderr, "effectfence %s: %s: %s\n", command.c_str(), step.c_str(), message.c_str());
}

int run_guarded(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const SQLite::Exception& e) {
    print_error(command, "reading the ledger", e.what());
  } catch (const std::exception& e) {
    print_error(command, "unexpected error", e.what());
  } catch (...) {
    print_error(command, "unexpected error", "unknown exception");
  }
  return kExitFailure;
}

int run_command(const CommandSpec& spec, const Args& args, const std::function<int(const ParsedArgs&)>& body) {
  return run_guarded(spec.name, [&] {
    const auto parsed = parse_args(args, spec.options);
    if (!parsed.ok()) {
      print_error(spec.name, "reading options", parsed.status().message());
      return kExitFailure;
    }
    if (parsed->has("help")) {
      spec.print_usage(stdout);
      return kExitOk;
    }
    if (parsed->positionals.size() != spec.positionals) {
      print_error(spec.name, "reading options",
                  spec.positionals == 0 ? "unexpected argument '" + parsed->positionals[0] + "'"
                                        : std::string("expected exactly ") + spec.positional_names +
                                              " (see effectfence " + spec.name + " --help)");
      return kExitFailure;
    }
    return body(*parsed);
  });
}

std::string open_error_text(const OpenError& error) {
  std::string text = std::string(open_error_name(error.code)) + ": " + error.message;
  switch (error.code) {
    case OpenErrorCode::not_a_ledger:
    case OpenErrorCode::unwritable:
    case OpenErrorCode::invalid_settings:
    case OpenErrorCode::linked:
    case OpenErrorCode::io:
      return text + " (the ledger is --db PATH, else $EFFECTFENCE_LEDGER)";
    case OpenErrorCode::corrupt:
      return text + " (`effectfence verify --db PATH` checks a ledger without changing it)";
    default:
      return text;
  }
}

int check_reads_in_place(const char* command, int exit_code) {
  if (const auto path = ledger_changed_while_read_in_place()) {
    std::fprintf(stderr,
                 "effectfence %s: reading the ledger: %s changed while it was read in place from a read-only mount "
                 "(a process writes it through another mount), so what was printed may not be one consistent "
                 "state. Read it where the servers run, or read a copy made while none has it open\n",
                 command, path->c_str());
    return exit_code == 0 ? kExitFailure : exit_code;
  }
  return exit_code;
}

}  // namespace effectfence::cli
