#include "ledger/log_damage.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <optional>
#include <vector>

#include "ledger/ledger_files.h"

namespace effectfence {
namespace {

// The write-ahead log's format (sqlite.org/fileformat2.html#walformat).
constexpr size_t kHeaderBytes = 32;
constexpr size_t kFrameHeaderBytes = 24;
constexpr uint32_t kMagicLittleEndianSums = 0x377f0682;
constexpr uint32_t kMagicBigEndianSums = 0x377f0683;
constexpr uint32_t kFormatVersion = 3007000;

uint32_t big_endian_32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}
uint32_t little_endian_32(const unsigned char* p) {
  return uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | uint32_t{p[0]};
}

struct Checksum {
  uint32_t s0 = 0;
  uint32_t s1 = 0;
  bool operator==(const Checksum& other) const { return s0 == other.s0 && s1 == other.s1; }
};

// SQLite's running checksum over 8-byte steps, words in the order the
// log's magic number names.
Checksum add_to_checksum(Checksum sum, bool big_endian_words, const unsigned char* data, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint32_t x0 = big_endian_words ? big_endian_32(data + i) : little_endian_32(data + i);
    const uint32_t x1 = big_endian_words ? big_endian_32(data + i + 4) : little_endian_32(data + i + 4);
    sum.s0 += x0 + sum.s1;
    sum.s1 += x1 + sum.s0;
  }
  return sum;
}

Checksum stored_checksum(const unsigned char* p) { return {big_endian_32(p), big_endian_32(p + 4)}; }

struct Frame {
  std::vector<unsigned char> bytes;
  uint32_t page() const { return big_endian_32(bytes.data()); }
  bool is_commit() const { return big_endian_32(bytes.data() + 4) != 0; }
  bool has_salts(const unsigned char* salts) const { return std::equal(salts, salts + 8, bytes.data() + 8); }
  // The same page number, commit mark and page bytes as other.
  bool repeats(const Frame& other) const {
    return std::equal(bytes.begin(), bytes.begin() + 8, other.bytes.begin()) &&
           std::equal(bytes.begin() + kFrameHeaderBytes, bytes.end(), other.bytes.begin() + kFrameHeaderBytes);
  }
  // The same page number and commit mark: all a damaged frame and a padding
  // copy of it are sure to share.
  bool same_header(const Frame& other) const {
    return std::equal(bytes.begin(), bytes.begin() + 8, other.bytes.begin());
  }
  Checksum stored() const { return stored_checksum(bytes.data() + 16); }
  // The checksum this frame should store, given the one before it.
  Checksum expected(Checksum before, bool big_endian_words) const {
    const size_t page_bytes = bytes.size() - kFrameHeaderBytes;
    before = add_to_checksum(before, big_endian_words, bytes.data(), 8);
    return add_to_checksum(before, big_endian_words, bytes.data() + kFrameHeaderBytes, page_bytes);
  }
};

bool valid_page_size(uint32_t size) { return size >= 512 && size <= 65536 && (size & (size - 1)) == 0; }

}  // namespace

LogScan scan_log(std::istream& log, uint32_t database_page_size) {
  LogScan scan;
  std::array<unsigned char, kHeaderBytes> header{};
  if (!log.read(reinterpret_cast<char*>(header.data()), kHeaderBytes)) return scan;
  const uint32_t magic = big_endian_32(header.data());
  const bool known_magic = magic == kMagicLittleEndianSums || magic == kMagicBigEndianSums;
  // A damaged magic number leaves the word order open: a frame that checks
  // out one way settles it.
  std::vector<bool> word_orders = {magic == kMagicBigEndianSums};
  if (!known_magic) word_orders = {false, true};
  const bool header_sound =
      known_magic && add_to_checksum({}, word_orders[0], header.data(), 24) == stored_checksum(header.data() + 24);
  // A sound header of another format version SQLite refuses out loud.
  if (header_sound && big_endian_32(header.data() + 4) != kFormatVersion) return scan;
  uint32_t page_size = big_endian_32(header.data() + 8);
  if (!header_sound && !valid_page_size(page_size)) page_size = database_page_size;
  if (!valid_page_size(page_size)) return scan;  // no frames to find
  // A damaged header's salts may be the damage: its first frame's are the log's.
  std::array<unsigned char, 8> salts{};
  std::copy(header.begin() + 16, header.begin() + 24, salts.begin());

  bool in_prefix = header_sound;  // SQLite reads no frame of a log whose header is damaged
  Checksum running = stored_checksum(header.data() + 24);
  Checksum before = running;  // what the previous frame stored
  std::optional<Checksum> before_alternative;  // what the damaged frame at the break should have stored
  bool just_past_break = false;                // this frame is the one after the damaged one
  uint64_t run_commits = 0;
  Frame frame{std::vector<unsigned char>(kFrameHeaderBytes + page_size)};
  Frame previous{std::vector<unsigned char>(frame.bytes.size())};
  for (uint64_t index = 1;; ++index) {
    if (!log.read(reinterpret_cast<char*>(frame.bytes.data()), static_cast<std::streamsize>(frame.bytes.size()))) break;
    if (index == 1 && !header_sound) std::copy(frame.bytes.begin() + 8, frame.bytes.begin() + 16, salts.begin());
    const bool ours = frame.page() != 0 && frame.has_salts(salts.data());
    // Without powersafe overwrite SQLite pads a commit to a sector boundary
    // by writing its last frame again: one transaction, not another.
    const bool new_commit = frame.is_commit() && !(index > 1 && frame.repeats(previous));
    if (in_prefix) {
      const Checksum sum = frame.expected(running, word_orders[0]);
      if (ours && sum == frame.stored()) {
        running = sum;
        before = frame.stored();
        if (frame.is_commit()) scan.frames_read = index;
        if (new_commit) ++scan.commits_read;
        std::swap(frame.bytes, previous.bytes);
        continue;
      }
      in_prefix = false;
      scan.break_offset = kHeaderBytes + (index - 1) * frame.bytes.size();
      // The damaged frame may itself end a transaction: one the next commit
      // proves was made durable, since it was written after it. Not when it
      // may be a padding copy of the commit before it (its page bytes are
      // damaged, so only its header can say): a torn padding frame, written
      // after its transaction's sync, loses nothing.
      run_commits = ours && frame.is_commit() && !(index > 1 && frame.same_header(previous)) ? 1 : 0;
      just_past_break = true;
      // The next frame chains from what this one stores, or, if the damage
      // is in its stored checksum, from what it should store.
      before_alternative = frame.expected(running, word_orders[0]);
      before = frame.stored();
      std::swap(frame.bytes, previous.bytes);
      continue;
    }
    // Past the break: does this frame follow from the one before it? Right
    // after a damaged commit frame, one with its header is taken for its
    // padding copy (a torn last commit, padded: one transaction, lost unsynced).
    const bool padding_of_damaged = just_past_break && frame.same_header(previous);
    just_past_break = false;
    const bool counts = new_commit && !padding_of_damaged;
    const bool follows = ours && std::any_of(word_orders.begin(), word_orders.end(), [&](bool order) {
                           const Checksum sum = frame.expected(before, order);
                           if (sum == frame.stored()) return true;
                           return before_alternative && frame.expected(*before_alternative, order) == frame.stored();
                         });
    before_alternative.reset();
    if (!follows) run_commits = 0;
    if (follows && counts) scan.commits_lost = std::max(scan.commits_lost, ++run_commits);
    before = frame.stored();
    std::swap(frame.bytes, previous.bytes);
  }
  if (scan.commits_lost < 2) {
    scan.commits_lost = 0;
    scan.break_offset = 0;
  }
  return scan;
}

namespace {

LogScan scan_file(const std::string& log_path, uint32_t database_page_size) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return {};
  return scan_log(in, database_page_size);
}

// What a writer changes: a log whose size and modification time are the
// same before one scan and after the next was not written in between.
struct FileState {
  off_t size = -1;
  int64_t modified_ns = -1;
  bool operator==(const FileState& other) const { return size == other.size && modified_ns == other.modified_ns; }
};

std::optional<FileState> regular_file_state(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileState{st.st_size, int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

// The page size the database's header gives (bytes 16-17; 1 means 65536), 0
// if unreadable. Only a regular file is opened: a pipe would block.
uint32_t database_page_size(const std::string& path) {
  if (!regular_file_state(path)) return 0;
  std::ifstream in(path, std::ios::binary);
  unsigned char header[18] = {0};
  if (!in.read(reinterpret_cast<char*>(header), sizeof header)) return 0;
  const uint32_t size = uint32_t{header[16]} << 8 | header[17];
  return size == 1 ? 65536 : size;
}

// Lost commits in log, as two scans with no write between them agree; a
// log being written all the while is taken as sound (a live server reads
// its own frames, and the next process to open it when quiet checks it).
std::optional<LogScan> settled_damage(const std::string& log, uint32_t page_size) {
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const auto before = regular_file_state(log);
    if (!before || before->size <= static_cast<off_t>(kHeaderBytes)) return std::nullopt;
    const LogScan first = scan_file(log, page_size);
    if (first.commits_lost == 0) return std::nullopt;
    const LogScan second = scan_file(log, page_size);
    if (regular_file_state(log) == before && second.commits_lost == first.commits_lost &&
        second.break_offset == first.break_offset) {
      return second;
    }
  }
  return std::nullopt;
}

// The ledger as spelled and, when links lead elsewhere, as resolved: SQLite
// keeps the log beside the file the links lead to.
std::vector<std::string> ledger_names(const std::string& ledger_path) {
  std::vector<std::string> names = {ledger_path};
  if (const std::string resolved = resolved_path(ledger_path); !resolved.empty() && resolved != ledger_path) {
    names.push_back(resolved);
  }
  return names;
}

// The format version of a log whose header checks out, 0 otherwise.
uint32_t sound_header_version(const std::string& log_path) {
  if (!regular_file_state(log_path)) return 0;
  std::ifstream in(log_path, std::ios::binary);
  std::array<unsigned char, kHeaderBytes> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), kHeaderBytes)) return 0;
  const uint32_t magic = big_endian_32(header.data());
  if (magic != kMagicLittleEndianSums && magic != kMagicBigEndianSums) return 0;
  const bool sound = add_to_checksum({}, magic == kMagicBigEndianSums, header.data(), 24) ==
                     stored_checksum(header.data() + 24);
  return sound ? big_endian_32(header.data() + 4) : 0;
}

}  // namespace

Status damaged_log(const std::string& ledger_path) {
  for (const std::string& name : ledger_names(ledger_path)) {
    const std::string log = name + "-wal";
    const auto log_state = regular_file_state(log);
    if (!log_state || log_state->size <= static_cast<off_t>(kHeaderBytes)) continue;
    const auto damage = settled_damage(log, database_page_size(name));
    if (!damage) continue;
    return Status::Error(
        "its log " + log + " is damaged at byte " + std::to_string(damage->break_offset) + ": SQLite would read " +
        std::to_string(damage->commits_read) + " transaction(s) from it and silently drop the " +
        std::to_string(damage->commits_lost) +
        " committed after the damage, and the outcomes recorded in them. Nothing was changed. Stop every "
        "process using the ledger and restore it, with its -wal, from a backup (docs/OPERATIONS.md, "
        "\"A damaged log\"). To keep only what comes before the damage, copy " + name + " and " + log +
        " aside, run sqlite3 " + name + " \"PRAGMA wal_checkpoint(TRUNCATE)\", then verify the ledger");
  }
  return Status::Ok();
}

Status foreign_log(const std::string& ledger_path) {
  for (const std::string& name : ledger_names(ledger_path)) {
    const std::string log = name + "-wal";
    const uint32_t version = sound_header_version(log);
    if (version == 0 || version == kFormatVersion) continue;
    return Status::Error(
        "its log " + log + " is in write-ahead-log format " + std::to_string(version) + ", and this SQLite (" +
        sqlite3_libversion() + ") reads only format " + std::to_string(kFormatVersion) +
        ": it was written by another SQLite and may hold committed outcomes. Nothing was changed. Stop every "
        "process using the ledger, open it once with the SQLite that wrote it and run PRAGMA "
        "wal_checkpoint(TRUNCATE), which moves the log's transactions into " + name +
        "; do not delete the log, which would lose them");
  }
  return Status::Ok();
}

}  // namespace effectfence
