// effectfence archive: moves old history out of a ledger (SQLite or
// PostgreSQL) into segment files, each written and synced before its rows are deleted
// (src/ledger/archive.h says what is kept and why).
#include <cstdio>
#include <memory>
#include <string>
#include <variant>

#include "cli/options.h"
#include "cli/output.h"
#include "cli/signing_key.h"
#include "cli/subcommand.h"
#include "cli/time_text.h"
#include "cli/commands.h"
#include "ledger/ledger_reader.h"
#include "core/signing.h"
#include "effectfence/fence.h"
#include "ledger/archive.h"
#include "ledger/open_ledger.h"
#include "ledger/sqlite_ledger.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "archive";

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence archive --db PATH --before AGE|TIME --out DIR [--signing-key FILE]\n"
               "                           [--rows N] [--segments N] [--json]\n\n"
               "Moves the certificates, signatures, events and clears older than the cutoff out of\n"
               "a ledger (an SQLite file or a PostgreSQL URL) into segment files in DIR\n"
               "(segment-000001.jsonl, ...), a few thousand rows each. Only whole intents go, and only\n"
               "those whose result no longer replays (no row in intents: swept after the result TTL),\n"
               "none of whose rows is newer than the cutoff, and none of whose certificates is a\n"
               "domain's head or the parent of an attempt in flight or unknown. Each segment is\n"
               "written, synced and renamed before its rows are deleted, in one short transaction that\n"
               "records it in the ledger's archives table; servers keep running meanwhile. Run it\n"
               "again after an interruption: it removes what the interrupted run left and carries on.\n"
               "Check the whole history with\n"
               "effectfence verify --db PATH --archive DIR.\n\n"
               "options:\n"
               "  --db PATH        the ledger (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --before WHEN    the cutoff: an age (90s, 30m, 1h, 30d) or a UTC time\n"
               "                   (2026-11-29, 2026-11-29T10:00:00Z)\n"
               "  --out DIR        the ledger's archive directory (created if missing; always the same one)\n"
               "  --signing-key FILE  sign each segment's root hash with this key (effectfence keygen)\n"
               "  --rows N         rows per segment and per delete transaction (default 4000)\n"
               "  --segments N     stop after N segments (default: until nothing old is left)\n"
               "  --json           one JSON object: {segments, certificates, signatures, events, clears,\n"
               "                   removed_unrecorded, removed_temporary, kept_for_history, last_root}\n"
               "  --help           this text\n\n"
               "exit status: 0 done (perhaps nothing to archive), 2 could not run (what was archived\n"
               "before the failure stays archived)\n",
               Settings::default_ledger_path("server").c_str());
}

std::optional<int64_t> positive(const std::string& text) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int64_t n = std::stoll(text);
  return n > 0 ? std::optional<int64_t>(n) : std::nullopt;
}

int archive(const ParsedArgs& parsed) {
  archive::ArchiveOptions options;
  const auto before = parsed.value("before");
  const auto out = parsed.value("out");
  if (!before || !out) {
    print_error(kCommand, "reading options", "--before and --out are required (effectfence archive --help)");
    return kExitFailure;
  }
  const int64_t now = now_ms();
  const auto cutoff = parse_since(*before, now);
  if (!cutoff.ok()) {
    print_error(kCommand, "reading options", "--before: " + cutoff.status().message());
    return kExitFailure;
  }
  if (*cutoff > now) {
    print_error(kCommand, "reading options", "--before " + *before + " is in the future");
    return kExitFailure;
  }
  options.before_ms = *cutoff;
  options.directory = *out;
  for (const auto& [name, field] : {std::pair<const char*, int64_t*>{"rows", &options.max_rows},
                                    std::pair<const char*, int64_t*>{"segments", &options.max_segments}}) {
    if (auto text = parsed.value(name)) {
      auto n = positive(*text);
      if (!n) {
        print_error(kCommand, "reading options", std::string("--") + name + " takes a positive whole number");
        return kExitFailure;
      }
      *field = *n;
    }
  }
  if (auto key = parsed.value("signing-key")) {
    auto signer = Signer::from_file(*key);
    if (!signer.ok()) {
      print_error(kCommand, "reading the signing key", signer.status().message() + kKeygenHint);
      return kExitFailure;
    }
    options.signer = *signer;
  }
  const std::string path = resolve_ledger_path(parsed, kCommand);
  // An existing ledger only (never create one), at the schema that has the
  // archives table: opening it as a server would migrates it.
  if (const auto opened = open_ledger_reader(path); !opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  {
    auto opened = is_postgres_ledger(path) ? open_ledger(path, options.busy_timeout_ms)
                                           : open_sqlite_ledger(path, options.busy_timeout_ms);
    if (const auto* why = std::get_if<OpenError>(&opened)) {
      print_error(kCommand, "opening the ledger", open_error_text(*why));
      return kExitFailure;
    }
  }
  options.ledger_path = path;
  const bool json = parsed.has("json");
  archive::ArchiveResult result;
  try {
    result = archive::run_archive(options, [&](const archive::RecordedSegment& s) {
      if (json) return;
      std::printf("archived %s: %lld certificates, %lld signatures, %lld events, %lld clears\n",
                   s.file.c_str(), static_cast<long long>(s.counts.certificates),
                   static_cast<long long>(s.counts.signatures), static_cast<long long>(s.counts.events),
                   static_cast<long long>(s.counts.clears));
      std::fflush(stdout);  // a line per segment as it is recorded, for whoever watches
    });
  } catch (const std::exception& e) {
    print_error(kCommand, "archiving", e.what());
    return kExitFailure;
  }
  if (json) {
    print_json_line({{"segments", result.segments},
                     {"certificates", result.rows.certificates},
                     {"signatures", result.rows.signatures},
                     {"events", result.rows.events},
                     {"clears", result.rows.clears},
                     {"removed_unrecorded", result.removed_unrecorded},
                     {"removed_temporary", result.removed_temporary},
                     {"retried_batches", result.retried_batches},
                     {"kept_for_history", result.kept_for_history},
                     {"before", format_utc(options.before_ms)},
                     {"last_root", result.last_root}});
  } else {
    std::printf("archived %lld segment(s) into %s: %lld certificates, %lld signatures, %lld events, %lld clears "
                "older than %s\n",
                static_cast<long long>(result.segments), options.directory.c_str(),
                static_cast<long long>(result.rows.certificates), static_cast<long long>(result.rows.signatures),
                static_cast<long long>(result.rows.events), static_cast<long long>(result.rows.clears),
                format_utc(options.before_ms).c_str());
    if (result.kept_for_history > 0) {
      std::printf("kept %lld intent(s) in the ledger whose events break the state machine; effectfence verify "
                  "names them (impossible_history)\n",
                  static_cast<long long>(result.kept_for_history));
    }
    if (result.removed_unrecorded + result.removed_temporary > 0) {
      std::printf("removed %lld unrecorded segment(s) and %lld temporary file(s) an interrupted archive left\n",
                  static_cast<long long>(result.removed_unrecorded),
                  static_cast<long long>(result.removed_temporary));
    }
  }
  return kExitOk;
}

}  // namespace

int run_archive(const Args& args) {
  return run_command({kCommand,
                      {{"db", true},
                       {"before", true},
                       {"out", true},
                       {"signing-key", true},
                       {"rows", true},
                       {"segments", true},
                       {"json", false}},
                      print_usage}, args, archive);
}

}  // namespace effectfence::cli
