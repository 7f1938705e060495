// effectfence clear: the audited operator clear of a fenced intent, for
// people who prefer not to write SQL. It is the same INSERT INTO clears the
// runbook shows, so the ledger's triggers refuse the same nonsense and write
// the same audit event; running servers see the clear at their next prepare.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <variant>

#include "effectfence/refusal_text.h"
#include "cli/options.h"
#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/commands.h"
#include "ledger/ledger_reader.h"
#include "core/status.h"
#include "core/terminal_safe.h"
#include "effectfence/fence.h"
#include "ledger/ledger_files.h"
#include "ledger/open_ledger.h"

namespace effectfence::cli {
namespace {

bool writable_by_me(const std::string& path) { return ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0; }

// Whether this user can write the SQLite ledger at path: the file, and the
// -wal and -shm beside it (or the directory, to create them); if not, why.
Status check_writable_ledger(const std::string& path) {
  if (is_postgres_ledger(path) || ::access(path.c_str(), F_OK) != 0) return Status::Ok();
  const std::string directory = directory_of(path);
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY)) {
    return Status::Error(path + " is on a read-only filesystem: a clear must be written to the ledger the servers "
                                "use, on a writable filesystem");
  }
  const bool side_files_writable = writable_by_me(path + "-wal") && writable_by_me(path + "-shm");
  if (writable_by_me(path) && (side_files_writable || writable_by_me(directory))) return Status::Ok();
  return Status::Error(path + " cannot be written by this user (uid " + std::to_string(::geteuid()) +
                       "): clearing writes to the ledger, and to the -wal and -shm files SQLite keeps beside it in " +
                       directory + ". Run effectfence clear as the user the servers run as");
}

constexpr const char* kCommand = "clear";

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence clear [--db PATH] INTENT --reason TEXT [--operator NAME] [--exact] [--json]\n\n"
               "Clears a fenced intent (state failed or unknown) after you have checked the real\n"
               "outcome, e.g. with the payment provider. The intent becomes 'cleared' and its next\n"
               "prepare is admitted as a fresh attempt. Who, when and why go to the append-only\n"
               "event log. Done and in-flight intents cannot be cleared.\n\n"
               "options:\n"
               "  --db PATH        ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --reason TEXT    why it is safe to run again (required; recorded)\n"
               "  --operator NAME  who clears it (default: $USER, else \"operator\")\n"
               "  --exact          take INTENT byte for byte (by default an intent may also be given\n"
               "                   as fenced prints it, with \\xNN, \\uNNNN and \\\\ escapes)\n"
               "  --json           print {cleared, intent, previous_state, operator, reason}\n"
               "  --help           this text\n\n"
               "exit status: 0 cleared, 2 refused (unknown intent, wrong state) or could not run\n",
               Settings::default_ledger_path("server").c_str());
}

std::string default_operator() {
  const char* user = std::getenv("USER");
  return user && *user ? user : "operator";
}

bool blank(const std::string& text) { return text.find_first_not_of(" \t\r\n\v\f") == std::string::npos; }

// Whether the ledger holds intent, or the error if it could not be read.
StatusOr<bool> exists(Fence& fence, const std::string& intent) {
  const auto status = fence.intent_status(intent);
  if (const auto* refused = std::get_if<Refusal>(&status)) {
    return Status::Error("could not read the ledger: " + explain(*refused, Step::read));
  }
  return std::get<IntentStatus>(status).state != IntentState::none;
}

// The intent meant by given: itself, or the intent that fenced printed as
// given (escaped, since it holds control or invisible characters). Both
// existing is refused: one's name is how the other prints.
StatusOr<std::string> intent_meant(Fence& fence, const std::string& given, bool exact) {
  if (exact) return given;
  const auto unescaped = terminal_unescape(given);
  if (!unescaped || *unescaped == given) return given;
  const auto printed_one = exists(fence, *unescaped);
  if (!printed_one.ok()) return printed_one.status();
  if (!*printed_one) return given;
  const auto raw_one = exists(fence, given);
  if (!raw_one.ok()) return raw_one.status();
  if (!*raw_one) return *unescaped;
  return Status::Error("two intents match: \"" + terminal_safe(given) + "\" as given, and the one fenced prints that "
                       "way. Give --exact to clear the one named by these exact bytes, or the other's raw bytes with "
                       "--exact (e.g. $'...' in bash)");
}

void print_result(bool json, const std::string& intent, const std::string& operator_name,
                  const std::string& reason, const ClearOutcome& outcome) {
  if (const auto* cleared = std::get_if<Cleared>(&outcome)) {
    if (json) {
      const Json out = {{"cleared", true},
                        {"intent", intent},
                        {"previous_state", cleared->previous_state},
                        {"operator", operator_name},
                        {"reason", reason}};
      print_json_line(out);
    } else {
      std::printf("cleared %s (was %s) by %s: %s\n", terminal_safe(intent).c_str(), cleared->previous_state.c_str(),
                  terminal_safe(operator_name).c_str(), terminal_safe(reason).c_str());
    }
    return;
  }
  const Refusal& refusal = std::get<Refusal>(outcome);
  if (json) {
    const Json out = {{"cleared", false},
                      {"intent", intent},
                      {"refused", reason_name(refusal.reason)},
                      {"message", explain(refusal, Step::clear)}};
    print_json_line(out);
  }
  print_error(kCommand, "clearing " + terminal_safe(intent), terminal_safe(explain(refusal, Step::clear)));
}

int clear(const ParsedArgs& parsed) {
  const auto reason = parsed.value("reason");
  if (!reason || blank(*reason)) {
    print_error(kCommand, "reading options", "--reason is required, and not blank: it goes in the audit log");
    return kExitFailure;
  }
  const std::string operator_name = parsed.value("operator").value_or(default_operator());
  if (blank(operator_name)) {
    print_error(kCommand, "reading options", "--operator may not be blank: it goes in the audit log");
    return kExitFailure;
  }
  // A clear lets the effect run again; one whose report would go nowhere
  // is not made (the operator would not know it happened).
  if (stdout_closed_at_start()) {
    print_error(kCommand, "writing to standard output", std::string(kStdoutClosed) + "; nothing was cleared");
    return kExitFailure;
  }
  const std::string path = resolve_ledger_path(parsed, kCommand);
  // Clearing writes: a user who may only read gets the owner's way out, not
  // the reader's (a cleared copy would change nothing).
  if (const Status writable = check_writable_ledger(path); !writable.ok()) {
    print_error(kCommand, "opening the ledger", writable.message());
    return kExitFailure;
  }
  // Clearing in a ledger that does not exist is a mistake in the path, not a
  // reason to create one.
  if (const auto opened = open_ledger_reader(path); !opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  Settings settings = Settings::from_environment();
  settings.ledger_path = path;
  settings.create_parent_directories = false;
  settings.promises_result_ttl = false;  // it serves no replays: the servers' TTL stands
  auto opened = Fence::open(settings);
  if (const auto* open_error = std::get_if<OpenError>(&opened)) {
    print_error(kCommand, "opening the ledger", open_error_text(*open_error));
    return kExitFailure;
  }
  Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
  const auto intent = intent_meant(fence, parsed.positionals[0], parsed.has("exact"));
  if (!intent.ok()) {
    print_error(kCommand, "finding the intent", intent.status().message());
    return kExitFailure;
  }
  const ClearOutcome outcome = fence.clear(*intent, operator_name, *reason);
  print_result(parsed.has("json"), *intent, operator_name, *reason, outcome);
  return std::holds_alternative<Cleared>(outcome) ? kExitOk : kExitFailure;
}

}  // namespace

int run_clear(const Args& args) {
  return run_command({kCommand,
                      {{"db", true}, {"reason", true}, {"operator", true}, {"exact", false}, {"json", false}},
                      print_usage,
                      1,
                      "one INTENT"}, args, clear);
}

}  // namespace effectfence::cli
