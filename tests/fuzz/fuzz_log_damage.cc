// The -wal damage scanner (src/ledger/log_damage.cc) on any bytes.
// Oracles: the counts are consistent (commits within frames, a break only
// with lost commits, inside the file); the valid prefix fits in the file;
// the same bytes scan alike twice; and the valid prefix alone, cut where
// SQLite stops reading, scans to the same frames and commits with nothing
// lost (what SQLite reads does not depend on what lies after it).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "ledger/log_damage.h"
#include "oracle.h"

using namespace effectfence;
using effectfence::fuzz::require;

namespace {

LogScan scan(const std::string& bytes) {
  std::istringstream in(bytes);
  return scan_log(in);
}

// The page size a -wal header states, 0 when it states none SQLite takes.
uint32_t header_page_size(const std::string& bytes) {
  if (bytes.size() < 32) return 0;
  uint32_t v = 0;
  for (int k = 8; k < 12; ++k) v = (v << 8) | static_cast<unsigned char>(bytes[k]);
  if (v == 1) v = 65536;
  return v >= 512 && v <= 65536 && (v & (v - 1)) == 0 ? v : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  LogScan first = scan(bytes);
  if (fuzz::planted() && first.frames_read > 0) ++first.frames_read;
  const LogScan second = scan(bytes);
  require(first.frames_read == second.frames_read && first.commits_read == second.commits_read &&
              first.commits_lost == second.commits_lost && first.break_offset == second.break_offset,
          "the same bytes scanned differently");
  require(first.commits_read <= first.frames_read, "more commits than frames read");
  // The break is a frame past the header, or the header itself (offset
  // 0: then SQLite reads no frame at all).
  require(first.commits_lost == 0 || (first.break_offset >= 32 && first.break_offset < size) ||
              (first.break_offset == 0 && first.frames_read == 0),
          "lost commits with a break outside the log");
  const uint32_t page = header_page_size(bytes);
  if (page == 0 || first.frames_read == 0) return 0;
  const uint64_t prefix = 32 + first.frames_read * (24 + static_cast<uint64_t>(page));
  require(prefix <= size, "the valid prefix is longer than the file");
  const LogScan cut = scan(bytes.substr(0, prefix));
  require(cut.frames_read == first.frames_read && cut.commits_read == first.commits_read && cut.commits_lost == 0,
          "the valid prefix alone scans to other counts");
  return 0;
}
