// The shared server's lease file (src/shared_server/lease.cc) holding any
// bytes. Oracles: from_text accepts only a pid kill() can be asked about
// as it is (1..pid_t max); what it accepts writes back (to_text) to a
// document that reads as the same lease; a lease file is empty exactly when
// it is, corrupt exactly when from_text refuses it, and live or starting
// only when the owner's pid names a process: written on this host, a lease
// whose pid is gone is stale.
//
// The bytes are judged in memory (classify_lease, what read_lease makes of
// what it read), so that an input costs no file system calls. The first
// input and every 64th after it also go through a real file: read_lease on
// the bytes written there must agree with classify_lease, so the file path
// stays under the same oracles and a crash found in it reproduces alone.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "oracle.h"
#include "ledger/holder.h"
#include "shared_server/lease.h"

using namespace effectfence;
using namespace effectfence::shared;
using effectfence::fuzz::require;

namespace {

const std::string& lease_path() {
  static const std::string path = [] {
    char dir[] = "/tmp/effectfence-fuzz-lease.XXXXXX";
    if (!::mkdtemp(dir)) fuzz::oracle_failed("cannot make a temporary directory");
    return std::string(dir) + "/l.server.json";
  }();
  return path;
}

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  require(fd >= 0, "cannot write " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    require(n > 0, "cannot write " + path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

bool same(const Lease& a, const Lease& b) {
  return a.owner.pid == b.owner.pid && a.owner.started == b.owner.started && a.owner.host == b.owner.host &&
         a.owner.boot == b.owner.boot && a.url == b.url && a.token == b.token && a.created_at_ms == b.created_at_ms &&
         a.ledger == b.ledger && a.lease_ttl_ms == b.lease_ttl_ms && a.result_ttl_ms == b.result_ttl_ms;
}

// What read_lease found in the file written with text, if this input is
// one that takes the file path; else what classify_lease makes of text.
LeaseReading judge(const std::string& text, bool through_file) {
  LeaseReading in_memory = classify_lease(text, 0, 1000);
  if (!through_file) return in_memory;
  write_file(lease_path(), text);
  LeaseReading from_file = read_lease(lease_path(), 0, 1000);
  require(from_file.kind == in_memory.kind && from_file.detail == in_memory.detail &&
              from_file.lease.has_value() == in_memory.lease.has_value() &&
              (!from_file.lease || same(*from_file.lease, *in_memory.lease)),
          std::string("the lease file read as ") + lease_case_name(from_file.kind) + " (" + from_file.detail +
              "), its bytes in memory as " + lease_case_name(in_memory.kind) + " (" + in_memory.detail + ")");
  return from_file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t inputs = 0;
  const bool through_file = inputs++ % 64 == 0 && size <= 64 * 1024;  // read_lease stops past 64 KiB
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<Lease> lease = Lease::from_text(text);
  if (lease) {
    require(lease->owner.pid > 0 && lease->owner.pid <= std::numeric_limits<pid_t>::max(),
            "a lease with pid " + std::to_string(lease->owner.pid) + " was accepted");
    Lease written = *lease;
    if (fuzz::planted()) written.token += "x";
    const std::optional<Lease> back = Lease::from_text(written.to_text());
    require(back && same(*back, *lease), "a lease does not read back as itself: " + lease->to_text());
  }
  const LeaseReading reading = judge(text, through_file);
  if (text.empty()) {
    require(reading.kind == LeaseCase::empty, std::string("an empty file read as ") + lease_case_name(reading.kind));
    return 0;
  }
  if (!lease) {
    require(reading.kind == LeaseCase::corrupt, std::string("a refused document read as ") +
                                                    lease_case_name(reading.kind));
    return 0;
  }
  require(reading.kind != LeaseCase::corrupt && reading.kind != LeaseCase::empty && reading.lease,
          std::string("an accepted lease read as ") + lease_case_name(reading.kind));
  // The same lease as if written on this host since boot: a pid that names
  // no process must make it stale (another host's pid says nothing here).
  static const Holder here = this_process();
  Lease local = *lease;
  local.owner.host = here.host;
  local.owner.boot = here.boot;
  const LeaseReading local_reading = judge(local.to_text(), through_file);
  const bool gone = ::kill(static_cast<pid_t>(lease->owner.pid), 0) != 0 && errno == ESRCH;
  if (gone) {
    require(local_reading.kind == LeaseCase::stale, "the lease of gone pid " + std::to_string(lease->owner.pid) +
                                                        " read as " + lease_case_name(local_reading.kind));
  }
  return 0;
}
