// The shared server's lease file (src/shared_server/lease.cc) holding any
// bytes. Oracles: from_text accepts only a pid kill() can be asked about
// as it is (1..pid_t max); what it accepts writes back (to_text) to a
// document that reads as the same lease; read_lease calls the file empty
// exactly when it is, corrupt exactly when from_text refuses it, and live
// or starting only when the owner's pid names a process: written on this
// host, a lease whose pid is gone is stale.
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
  write_file(lease_path(), text);
  const LeaseReading reading = read_lease(lease_path(), 0, 1000);
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
  write_file(lease_path(), local.to_text());
  const LeaseReading local_reading = read_lease(lease_path(), 0, 1000);
  const bool gone = ::kill(static_cast<pid_t>(lease->owner.pid), 0) != 0 && errno == ESRCH;
  if (gone) {
    require(local_reading.kind == LeaseCase::stale, "the lease of gone pid " + std::to_string(lease->owner.pid) +
                                                        " read as " + lease_case_name(local_reading.kind));
  }
  return 0;
}
