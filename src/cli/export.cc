// effectfence export: an audit dump of the certificates and the event log.
//
// Records come out merged in order of time: certificates by committed_at and
// events by at (ties: the certificate first, then events by id). Both tables
// are read through their time index inside one read transaction, stepping
// one row at a time, so the dump is a consistent snapshot and memory stays
// constant however large the ledger is; writers are never blocked (WAL).
// A JSONL dump ends with an end record counting what it holds, so a dump
// cut short is told from a whole one.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/archive_check.h"
#include "cli/options.h"
#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/time_text.h"
#include "ledger/read_only.h"
#include "cli/commands.h"
#include "core/status.h"
#include "ledger/history_reads.h"
#include "ledger/ledger_reader.h"
#include "ledger/ledger_files.h"
#include "ledger/open_ledger.h"
#include "effectfence/fence.h"
#include "effectfence/json.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "export";
// 2: the dump ends with {"type":"end",...}. (1 had no end record.)
constexpr int kExportFormatVersion = 2;

using OrderedJson = nlohmann::ordered_json;

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence export [--db PATH] [--since TIME] [--format jsonl|csv] [--out FILE]\n\n"
               "Writes every certificate and event, merged in order of time (certificates by\n"
               "committed_at, events by at; on a tie the certificate comes first). Reads one\n"
               "consistent snapshot through a read-only connection; memory stays constant.\n\n"
               "options:\n"
               "  --db PATH        ledger file or postgres:// URL (default: $EFFECTFENCE_LEDGER, else %s)\n"
               "  --since TIME     only records at or after TIME: ISO-8601 UTC (2026-11-29T10:00:00Z)\n"
               "                   or an age (90s, 30m, 1h, 7d)\n"
               "  --format FORMAT  jsonl (default) or csv\n"
               "  --out FILE       write FILE (complete or not at all) instead of stdout; never the\n"
               "                   ledger, its -wal or -shm, nor any other SQLite database\n"
               "  --help           this text\n\n"
               "jsonl: the first line is {\"type\":\"export\",...} (format, ledger, since, exported_at);\n"
               "then one record per line with \"type\" \"certificate\" or \"event\"; the last line is\n"
               "{\"type\":\"end\",\"certificates\":N,\"events\":M}, so a dump cut short shows. A certificate's\n"
               "\"body\" is the exact canonical JSON its \"hash\" is the SHA-256 of:\n"
               "  jq -j 'select(.type==\"certificate\") | .body' | sha256sum   (one line at a time)\n"
               "Check a whole dump with: effectfence verify --export FILE\n"
               "A ledger that archived its old history (effectfence archive) adds \"archived\" to the\n"
               "first line: the segments before the dump and the root it continues from. Check the\n"
               "dump and its segments as one history with: verify --export FILE --archive DIR\n"
               "csv: RFC 4180 with a header row (no end record); columns %s\n",
               Settings::default_ledger_path("server").c_str(), kExportCsvHeader);
}

enum class Format { jsonl, csv };

struct ExportOptions {
  std::string ledger;
  std::optional<int64_t> since_ms;
  Format format = Format::jsonl;
  std::optional<std::string> out;
};

template <typename T>
OrderedJson or_null(const std::optional<T>& value) {
  return value ? OrderedJson(*value) : OrderedJson(nullptr);
}

// detail is JSON in the ledger; kept as a string if someone broke it, so
// the dump shows what is there instead of failing.
// An event's detail as the object it is. Bytes that are not UTF-8 (a clear
// typed on a Latin-1 terminal) are replaced first, as everywhere in a dump,
// so the detail stays an object jq can read; text that is no JSON at all is
// kept as a string.
OrderedJson detail_json(const std::string& text) {
  JsonError error;
  auto parsed = parse_strict(text, &error, WideIntegers::as_doubles);
  if (!parsed) {
    const std::string replaced =
        OrderedJson::parse(OrderedJson(text).dump(-1, ' ', false, OrderedJson::error_handler_t::replace))
            .get<std::string>();
    parsed = parse_strict(replaced, &error, WideIntegers::as_doubles);
  }
  return parsed ? OrderedJson::parse(parsed->dump()) : OrderedJson(text);
}

// Invalid UTF-8 (only a tampered row can hold it) is replaced rather than
// aborting the dump; verify then reports the certificate.
std::string dump_line(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

// Writes the records in one format to a stream.
class RecordWriter {
 public:
  RecordWriter(std::FILE* out, Format format) : out_(out), format_(format) {}

  // archived: the segments the ledger's older history was moved into, if
  // any; the dump continues from the last one's root.
  void header(const ExportOptions& options, const std::vector<archive::RecordedSegment>& archived) {
    if (format_ == Format::csv) {
      put(std::string(kExportCsvHeader) + "\r\n");
      return;
    }
    OrderedJson j;
    j["type"] = "export";
    j["format"] = kExportFormatVersion;
    j["ledger"] = printable_ledger(options.ledger);
    j["since"] = options.since_ms ? OrderedJson(format_utc(*options.since_ms)) : OrderedJson(nullptr);
    j["since_ms"] = or_null(options.since_ms);
    j["exported_at"] = format_utc(now_ms());
    if (!archived.empty()) {
      archive::SegmentCounts held;
      for (const archive::RecordedSegment& r : archived) {
        held.certificates += r.counts.certificates;
        held.signatures += r.counts.signatures;
        held.events += r.counts.events;
        held.clears += r.counts.clears;
      }
      j["archived"] = {{"ledger", archived.back().ledger_id},
                       {"segments", archived.back().segment},
                       {"root", archived.back().root},
                       {"certificates", held.certificates},
                       {"signatures", held.signatures},
                       {"events", held.events},
                       {"clears", held.clears}};
    }
    put(dump_line(j));
  }

  void certificate(const StoredCertificate& c) {
    if (format_ == Format::csv) {
      put_csv_row({"certificate", format_utc(c.committed_at), std::to_string(c.committed_at), "", "", "", "",
                   c.hash, c.parent, c.intent, c.domain, std::to_string(c.seq), std::to_string(c.generation), c.tool,
                   c.agent, c.body});
      return;
    }
    OrderedJson j;
    j["type"] = "certificate";
    j["committed_at"] = format_utc(c.committed_at);
    j["committed_at_ms"] = c.committed_at;
    j["hash"] = c.hash;
    j["body"] = c.body;
    // Signed certificates carry their signature, so verify --export checks it offline.
    if (c.signature) {
      j["signature"] = {{"key_id", c.signature->key_id},
                        {"signature", c.signature->signature},
                        {"unsigned_before", c.signature->unsigned_before}};
    }
    put(dump_line(j));
  }

  void event(const StoredEvent& e) {
    if (format_ == Format::csv) {
      auto number = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string(); };
      put_csv_row({"event", format_utc(e.at), std::to_string(e.at), std::to_string(e.id), e.kind, e.actor, e.detail,
                   "", "", e.intent.value_or(""), e.domain.value_or(""), number(e.seq), number(e.generation), "", "",
                   ""});
      return;
    }
    OrderedJson j;
    j["type"] = "event";
    j["at"] = format_utc(e.at);
    j["at_ms"] = e.at;
    j["id"] = e.id;
    j["kind"] = e.kind;
    j["intent"] = or_null(e.intent);
    j["domain"] = or_null(e.domain);
    j["seq"] = or_null(e.seq);
    j["generation"] = or_null(e.generation);
    j["actor"] = e.actor;
    j["detail"] = detail_json(e.detail);
    put(dump_line(j));
  }

  // Written only after every record: its counts say the dump is whole.
  void end(int64_t certificates, int64_t events) {
    if (format_ == Format::csv) return;
    OrderedJson j;
    j["type"] = "end";
    j["certificates"] = certificates;
    j["events"] = events;
    put(dump_line(j));
  }

  // Returns true iff every write so far reached the stream.
  bool ok() const { return ok_; }

 private:
  void put(const std::string& text) {
    if (ok_ && std::fwrite(text.data(), 1, text.size(), out_) != text.size()) ok_ = false;
  }
  void put_csv_row(std::initializer_list<std::string> fields) {
    std::string line;
    bool first = true;
    for (const auto& field : fields) {
      if (!first) line += ',';
      line += csv_field(field);
      first = false;
    }
    line += "\r\n";  // RFC 4180 line break
    put(line);
  }

  std::FILE* out_;
  Format format_;
  bool ok_ = true;
};

// The rows were read through the time indexes: a damaged index would
// leave some out of a dump that looks whole. Counted again from the tables
// themselves, before the end record that vouches for the dump. Throws on a
// mismatch.
void check_against_tables(LedgerReader& db, int64_t since, const HistoryCounts& read) {
  const auto held = count_without_time_index(db, since);
  if (!held) return;
  struct Table {
    const char* name;
    int64_t held, read;
  };
  for (const Table& t : {Table{"certificates", held->certificates, read.certificates},
                         Table{"events", held->events, read.events}}) {
    if (t.held == t.read) continue;
    const std::string table = t.name;
    throw std::runtime_error(
        "the " + table + " table holds " + std::to_string(t.held) + " row(s) for this dump, but its time index gave " +
        std::to_string(t.read) + ": the index is damaged, and a dump read through it would miss records. No dump was "
        "written as complete. Stop the servers, run sqlite3 " + db.name() + " \"PRAGMA integrity_check\", "
        "then restore the ledger from a backup, or rebuild the index with REINDEX " + table + " and export again");
  }
}

// Steps both walks in time order and merges them (a tie: the certificate
// first); each walks its time index, so memory stays constant.
HistoryCounts write_records(LedgerReader& db, const ExportOptions& options, RecordWriter& writer) {
  CertificateWalk walk;
  walk.since_ms = options.since_ms.value_or(INT64_MIN);
  walk.signatures = true;
  auto certificates = certificates_in_commit_order(db, walk);
  auto events = events_in_time_order(db, walk.since_ms);
  HistoryCounts counts;
  writer.header(options, read_archive_records(db));
  auto certificate = certificates.next();
  auto event = events.next();
  while ((certificate || event) && writer.ok()) {
    if (certificate && (!event || certificate->committed_at <= event->at)) {
      writer.certificate(*certificate);
      ++counts.certificates;
      certificate = certificates.next();
    } else {
      writer.event(*event);
      ++counts.events;
      event = events.next();
    }
  }
  if (writer.ok()) check_against_tables(db, walk.since_ms, counts);
  writer.end(counts.certificates, counts.events);
  return counts;
}

StatusOr<ExportOptions> read_options(const ParsedArgs& parsed) {
  ExportOptions options;
  options.ledger = resolve_ledger_path(parsed, kCommand);
  if (auto since = parsed.value("since")) {
    const auto since_ms = parse_since(*since, now_ms());
    if (!since_ms.ok()) return since_ms.status();
    options.since_ms = *since_ms;
  }
  const std::string format = parsed.value("format").value_or("jsonl");
  if (format == "csv") {
    options.format = Format::csv;
  } else if (format != "jsonl") {
    return Status::Error("--format must be jsonl or csv, not '" + format + "'");
  }
  options.out = parsed.value("out");
  return options;
}

// Renaming a dump over the ledger (or over its -wal, -shm or -journal, which
// SQLite names after the ledger's resolved path) would destroy recorded
// outcomes: late duplicates would run again. Any other SQLite file is
// refused too, since a dump is never one. An error says why out must not
// be written.
Status check_output(const std::string& out, const std::string& ledger) {
  if (!is_postgres_ledger(ledger)) {
    const std::string out_resolved = resolved_path(out);
    for (const std::string& file : ledger_files(ledger)) {
      const bool same_path = !out_resolved.empty() && out_resolved == resolved_path(file);
      if (same_path || same_file(out, file)) {
        return Status::Error("--out " + out + " is " + file + ", the ledger or a file SQLite keeps beside it; "
                             "refusing to overwrite it (give the dump another name)");
      }
    }
  }
  if (const std::string database = database_beside(out); !database.empty()) {
    return Status::Error("--out " + out + " is where SQLite keeps the log or lock of the database " + database +
                         "; refusing to write there (give the dump another name)");
  }
  if (is_sqlite_file(out)) {
    return Status::Error("--out " + out +
                         " is an SQLite file; refusing to replace it with a dump (give the dump another name)");
  }
  return Status::Ok();
}

// A stop signal ends the export before any destructor runs, so its handler
// removes the partial dump itself (unlink is async-signal-safe), then ends
// the process by the same signal.
char partial_dump[PATH_MAX];
volatile std::sig_atomic_t partial_dump_exists = 0;

extern "C" void remove_partial_dump_and_stop(int sig) {
  if (partial_dump_exists) ::unlink(partial_dump);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void remove_partial_dump_on_stop(const std::string& path) {
  if (path.size() >= sizeof partial_dump) return;  // left to the destructor alone
  std::memcpy(partial_dump, path.c_str(), path.size() + 1);
  partial_dump_exists = 1;
  struct sigaction action {};
  action.sa_handler = remove_partial_dump_and_stop;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
}

bool under_proc(const std::filesystem::path& path) {
  std::error_code failed;
  const std::string resolved = std::filesystem::canonical(path, failed).string();
  return !failed && resolved.rfind("/proc/", 0) == 0;
}

// The regular file a symlink names, through a chain of links, or the file it
// will name when nothing is there yet; nothing when it names something else
// or a file descriptor (/dev/stdout, /dev/fd/1: links into /proc that name
// whatever the stream is, a file appended to included, which a rename would
// replace).
std::optional<std::string> file_behind_link(const std::string& link) {
  namespace fs = std::filesystem;
  std::error_code failed;
  fs::path current = link;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(current, failed)); ++hops) {
    fs::path next = fs::read_symlink(current, failed);
    if (failed || under_proc(current.parent_path())) return std::nullopt;
    current = next.is_relative() ? current.parent_path() / next : next;
    if (under_proc(current.parent_path())) return std::nullopt;
  }
  const fs::file_status status = fs::symlink_status(current, failed);
  if (status.type() == fs::file_type::not_found) {
    const fs::path parent = fs::canonical(current.has_parent_path() ? current.parent_path() : ".", failed);
    if (failed || !fs::is_directory(parent, failed)) return std::nullopt;
    return (parent / current.filename()).string();
  }
  if (!fs::is_regular_file(status)) return std::nullopt;
  const fs::path file = fs::canonical(current, failed);
  if (failed) return std::nullopt;
  return file.string();
}

// Standard output or standard error, when `path` names the very file it is
// (the same device and inode); -1 otherwise.
int own_stream_named(const std::string& path) {
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) return -1;
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat stream {};
    if (::fstat(fd, &stream) == 0 && stream.st_dev == named.st_dev && stream.st_ino == named.st_ino) return fd;
  }
  return -1;
}

// The dump goes to a temporary file next to --out and is renamed over it
// only when complete, so a failed export never leaves a truncated file that
// looks like a whole audit trail. A symlink to a regular file, or to nothing
// yet, gets the same for the file it names, and stays a link. An --out that
// exists and is not a regular file (/dev/null, a pipe, a link to a
// descriptor such as /dev/stdout) is written in place: renaming over it
// would replace the device, pipe or link itself.
class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {
    struct stat st {};
    const bool exists = ::lstat(path_.c_str(), &st) == 0;
    const auto linked_file = exists && S_ISLNK(st.st_mode) ? file_behind_link(path_) : std::nullopt;
    if (linked_file) path_ = *linked_file;
    in_place_ = exists && !S_ISREG(st.st_mode) && !linked_file;
    target_ = in_place_ ? path_ : path_ + ".partial-" + std::to_string(::getpid());
  }
  ~OutputFile() {
    if (file_) std::fclose(file_);
    if (!in_place_ && !committed_) std::remove(target_.c_str());
    partial_dump_exists = 0;
  }
  StatusOr<std::FILE*> open() {
    if (in_place_) {
      // The stream this process was given (/dev/stdout, /dev/fd/1) is
      // written through its own descriptor, at the place the shell is in
      // it: reopened, it would start a new offset, and the shell's next
      // line would land on the dump.
      if (const int fd = own_stream_named(target_); fd >= 0) {
        const int copy = ::dup(fd);
        file_ = copy < 0 ? nullptr : ::fdopen(copy, "ab");
        if (!file_) {
          const Status failed = Status::Error("cannot write to " + target_ + ": " + std::strerror(errno));
          if (copy >= 0) ::close(copy);
          return failed;
        }
        return file_;
      }
    }
    // In place is appended to, never truncated: /dev/stdout of a shell's
    // `>> audit.log` reopens that very file, whose earlier lines stay.
    file_ = std::fopen(target_.c_str(), in_place_ ? "ab" : "wb");
    if (!file_) return Status::Error("cannot create " + target_ + ": " + std::strerror(errno));
    if (!in_place_) remove_partial_dump_on_stop(target_);
    return file_;
  }
  // Flushes, syncs and closes the dump; then put_in_place() publishes it.
  Status finish_writing() {
    bool written = std::fflush(file_) == 0;
    // A regular file must be on disk before it replaces the old one.
    if (written && !in_place_) written = ::fsync(::fileno(file_)) == 0;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!written || !closed) return Status::Error("writing " + target_ + ": " + std::strerror(errno));
    return Status::Ok();
  }
  Status put_in_place() {
    if (!in_place_ && std::rename(target_.c_str(), path_.c_str()) != 0) {
      return Status::Error("renaming " + target_ + " to " + path_ + ": " + std::strerror(errno));
    }
    committed_ = true;
    partial_dump_exists = 0;
    return Status::Ok();
  }

 private:
  std::string path_, target_;
  bool in_place_ = false;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

int export_ledger(const ParsedArgs& parsed) {
  auto options = read_options(parsed);
  if (!options.ok()) {
    print_error(kCommand, "reading options", options.status().message());
    return kExitFailure;
  }
  if (!options->out && stdout_closed_at_start()) {  // before reading a ledger for nobody
    print_error(kCommand, "writing to standard output", kStdoutClosed);
    return kExitFailure;
  }
  if (options->out) {
    if (const Status allowed = check_output(*options->out, options->ledger); !allowed.ok()) {
      print_error(kCommand, "opening the output", allowed.message());
      return kExitFailure;
    }
  }
  auto opened = open_ledger_reader(options->ledger);
  if (!opened.ok()) {
    print_error(kCommand, "opening the ledger", opened.status().message());
    return kExitFailure;
  }
  std::unique_ptr<LedgerReader> db = std::move(*opened);
  std::optional<OutputFile> file;
  std::FILE* out = stdout;
  if (options->out) {
    file.emplace(*options->out);
    const auto opened_out = file->open();
    if (!opened_out.ok()) {
      print_error(kCommand, "opening the output", opened_out.status().message());
      return kExitFailure;
    }
    out = *opened_out;
  }
  static char buffer[1 << 16];
  std::setvbuf(out, buffer, _IOFBF, sizeof buffer);
  RecordWriter writer(out, options->format);
  HistoryCounts counts;
  try {
    counts = write_records(*db, *options, writer);
  } catch (const std::exception& e) {
    print_error(kCommand, "reading the ledger", e.what());
    return kExitFailure;
  }
  if (!writer.ok() || std::fflush(out) != 0) {
    print_error(kCommand, "writing the output", std::strerror(errno));
    return kExitFailure;
  }
  if (file) {
    if (const Status written = file->finish_writing(); !written.ok()) {
      print_error(kCommand, "writing the output", written.message());
      return kExitFailure;
    }
    // Not one consistent state: never put in place of an earlier dump
    // (checked after the sync, just before the rename; main's
    // check_reads_in_place names the error).
    if (ledger_changed_while_read_in_place()) return kExitFailure;
    if (const Status placed = file->put_in_place(); !placed.ok()) {
      print_error(kCommand, "writing the output", placed.message());
      return kExitFailure;
    }
    std::fprintf(stderr, "effectfence export: wrote %lld certificate(s) and %lld event(s) to %s\n",
                 static_cast<long long>(counts.certificates), static_cast<long long>(counts.events),
                 options->out->c_str());
  }
  return kExitOk;
}

}  // namespace

int run_export(const Args& args) {
  return run_command({kCommand, {{"db", true}, {"since", true}, {"format", true}, {"out", true}}, print_usage}, args, export_ledger);
}

}  // namespace effectfence::cli
