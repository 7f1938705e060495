#include "ledger/log_damage.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <fstream>
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
  Checksum stored() const { return stored_checksum(bytes.data() + 16); }
  // The checksum this frame should store, given the one before it.
  Checksum expected(Checksum before, bool big_endian_words) const {
    before = add_to_checksum(before, big_endian_words, bytes.data(), 8);
    return add_to_checksum(before, big_endian_words, bytes.data() + kFrameHeaderBytes, bytes.size() - kFrameHeaderBytes);
  }
};

bool valid_page_size(uint32_t size) { return size >= 512 && size <= 65536 && (size & (size - 1)) == 0; }

}  // namespace

LogScan scan_log(std::istream& log) {
  LogScan scan;
  std::array<unsigned char, kHeaderBytes> header{};
  if (!log.read(reinterpret_cast<char*>(header.data()), kHeaderBytes)) return scan;
  const uint32_t magic = big_endian_32(header.data());
  const uint32_t page_size = big_endian_32(header.data() + 8);
  // Without a page size there are no frames to find.
  if (!valid_page_size(page_size)) return scan;
  const unsigned char* salts = header.data() + 16;
  const bool known_magic = magic == kMagicLittleEndianSums || magic == kMagicBigEndianSums;
  // A damaged magic number leaves the word order open: a frame that checks
  // out one way settles it.
  std::vector<bool> word_orders = {magic == kMagicBigEndianSums};
  if (!known_magic) word_orders = {false, true};
  const bool header_sound =
      known_magic && big_endian_32(header.data() + 4) == kFormatVersion &&
      add_to_checksum({}, word_orders[0], header.data(), 24) == stored_checksum(header.data() + 24);

  bool in_prefix = header_sound;  // SQLite reads no frame of a log whose header is damaged
  Checksum running = stored_checksum(header.data() + 24);
  Checksum before = running;  // what the previous frame stored
  uint64_t run_commits = 0;
  Frame frame{std::vector<unsigned char>(kFrameHeaderBytes + page_size)};
  for (uint64_t index = 1;; ++index) {
    if (!log.read(reinterpret_cast<char*>(frame.bytes.data()), static_cast<std::streamsize>(frame.bytes.size()))) break;
    const bool ours = frame.page() != 0 && frame.has_salts(salts);
    if (in_prefix) {
      const Checksum sum = frame.expected(running, word_orders[0]);
      if (ours && sum == frame.stored()) {
        running = sum;
        before = frame.stored();
        if (frame.is_commit()) {
          scan.frames_read = index;
          ++scan.commits_read;
        }
        continue;
      }
      in_prefix = false;
      scan.break_offset = kHeaderBytes + (index - 1) * frame.bytes.size();
    }
    // Past the break: does this frame follow from the one before it?
    const bool follows = ours && std::any_of(word_orders.begin(), word_orders.end(), [&](bool order) {
                           return frame.expected(before, order) == frame.stored();
                         });
    if (!follows) run_commits = 0;
    if (follows && frame.is_commit()) scan.commits_lost = std::max(scan.commits_lost, ++run_commits);
    before = frame.stored();
  }
  if (scan.commits_lost < 2) {
    scan.commits_lost = 0;
    scan.break_offset = 0;
  }
  return scan;
}

namespace {

LogScan scan_file(const std::string& log_path) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return {};
  return scan_log(in);
}

std::string first_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

}  // namespace

std::string damaged_log(const std::string& ledger_path) {
  std::vector<std::string> names = {ledger_path};
  if (const std::string resolved = resolved_path(ledger_path); !resolved.empty() && resolved != ledger_path) {
    names.push_back(resolved);
  }
  for (const std::string& name : names) {
    const std::string log = name + "-wal";
    struct stat st {};
    if (::stat(log.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= static_cast<off_t>(kHeaderBytes)) {
      continue;
    }
    const std::string header = first_bytes(log, kHeaderBytes);
    const LogScan first = scan_file(log);
    if (first.commits_lost == 0) continue;
    const LogScan second = scan_file(log);
    if (second.commits_lost == 0 || first_bytes(log, kHeaderBytes) != header) continue;
    return "its log " + log + " is damaged at byte " + std::to_string(second.break_offset) + ": SQLite would read " +
           std::to_string(second.commits_read) + " transaction(s) from it and silently drop the " +
           std::to_string(second.commits_lost) +
           " committed after the damage, and the outcomes recorded in them. Nothing was changed. Stop every "
           "process using the ledger and restore it, with its -wal, from a backup (docs/OPERATIONS.md, "
           "\"A damaged log\"). To keep only what comes before the damage, copy " + name + " and " + log +
           " aside, run sqlite3 " + name + " \"PRAGMA wal_checkpoint(TRUNCATE)\", then effectfence verify --db " +
           name;
  }
  return "";
}

}  // namespace effectfence
