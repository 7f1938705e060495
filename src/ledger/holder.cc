#include "ledger/holder.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace effectfence {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// The inode of the initial PID namespace is fixed (PROC_PID_INIT_INO).
constexpr const char* kInitialPidNamespace = "4026531836";

// "" in the initial PID namespace, else "/pidns:<inode>". Pids (and so
// whether a holder still runs) can only be judged between processes that
// share a PID namespace: a container with the host's name but pids of its
// own is another host here, judged by its lease, as it judges us.
std::string pid_namespace_suffix() {
  char link[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return "";
  const std::string ns(link, static_cast<size_t>(n));  // "pid:[4026531836]"
  const size_t open = ns.find('[');
  const size_t close = ns.find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return "";
  const std::string inode = ns.substr(open + 1, close - open - 1);
  return inode == kInitialPidNamespace ? "" : "/pidns:" + inode;
}

struct ProcStat {
  char state = '?';
  int64_t started = -1;
};

// /proc/<pid>/stat: "pid (comm) state ... starttime(22nd field) ...".
// comm may hold spaces and parentheses, so parse after the last ')'.
std::optional<ProcStat> read_proc_stat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  ProcStat stat;
  rest >> stat.state;
  std::string field;
  // Fields 4..21 come before starttime (field 22).
  for (int i = 4; i <= 21 && rest >> field; ++i) {
  }
  if (!(rest >> stat.started)) return std::nullopt;
  return stat;
}

Holder make_this_process() {
  Holder h;
  h.host = host_name() + pid_namespace_suffix();
  h.boot = read_first_line("/proc/sys/kernel/random/boot_id");
  h.pid = getpid();
  const auto stat = read_proc_stat(h.pid);
  h.started = stat ? stat->started : 0;
  return h;
}

}  // namespace

const Holder& this_process() {
  // Recomputed after fork: a child must not claim its parent's identity.
  static thread_local pid_t cached_pid = 0;
  static thread_local Holder cached;
  if (cached_pid != getpid()) {
    cached = make_this_process();
    cached_pid = getpid();
  }
  return cached;
}

namespace {

enum class Liveness { gone, running, cannot_tell };

// What this host can tell about holder: one judgement behind both questions,
// so "dead" and "alive" can never both be true of a holder.
Liveness liveness_of(const Holder& holder) {
  const Holder& me = this_process();
  if (holder.host != me.host) return Liveness::cannot_tell;  // its lease decides
  if (!holder.boot.empty() && !me.boot.empty() && holder.boot != me.boot) return Liveness::gone;
  // Beyond pid_t, kill() would ask about another pid (4294967297 is 1).
  if (holder.pid <= 0 || holder.pid > std::numeric_limits<pid_t>::max()) return Liveness::cannot_tell;
  if (kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH) return Liveness::gone;
  const auto stat = read_proc_stat(holder.pid);
  if (!stat) return Liveness::cannot_tell;  // e.g. /proc hidden
  if (stat->state == 'Z' || stat->state == 'X') return Liveness::gone;
  if (holder.started == 0) return Liveness::cannot_tell;
  if (stat->started != holder.started) return Liveness::gone;  // the pid was reused
  // Running only if this very boot vouches for it.
  return holder.boot.empty() || holder.boot != me.boot ? Liveness::cannot_tell : Liveness::running;
}

}  // namespace

bool holder_is_dead(const Holder& holder) { return liveness_of(holder) == Liveness::gone; }

bool holder_is_alive_here(const Holder& holder) { return liveness_of(holder) == Liveness::running; }

}  // namespace effectfence
