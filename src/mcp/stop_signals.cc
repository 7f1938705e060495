#include "mcp/stop_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

namespace effectfence::mcp {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
// Lock-free atomics: the handler may run on any thread, even nested.
std::atomic<int> g_received{0};
std::atomic<int> g_count{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free counter");
volatile int g_write_fd = -1;

extern "C" void on_stop_signal(int signal) {
  const int saved_errno = errno;
  int none = 0;
  g_received.compare_exchange_strong(none, signal);
  g_count.fetch_add(1);
  const char byte = static_cast<char>(signal);
  if (g_write_fd >= 0) {
    [[maybe_unused]] ssize_t ignored = ::write(g_write_fd, &byte, 1);
  }
  errno = saved_errno;
}

void set_flags(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace

StopSignals::StopSignals() {
  int fds[2];
  if (::pipe(fds) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    set_flags(read_fd_);
    set_flags(write_fd_);
  }
  g_received.store(0);
  g_count.store(0);
  g_write_fd = write_fd_;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : kStopSignals) ::sigaction(signal, &action, nullptr);
}

StopSignals::~StopSignals() {
  for (int signal : kStopSignals) ::signal(signal, SIG_DFL);
  g_write_fd = -1;
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

int StopSignals::received() const { return g_received.load(); }

int StopSignals::count() const { return g_count.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace effectfence::mcp
