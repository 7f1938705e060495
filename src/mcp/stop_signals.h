// SIGTERM, SIGINT and SIGHUP as a readable file descriptor (self-pipe), so a
// poll() loop stops taking input and shuts down in order instead of dying
// with admissions half-handled.
#pragma once

namespace effectfence::mcp {

class StopSignals {
 public:
  // Installs the handlers. One instance per process at a time.
  StopSignals();
  // Restores the default dispositions.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Readable once a stop signal has arrived (and from then on).
  int fd() const { return read_fd_; }
  // The first stop signal received, or 0.
  int received() const;
  // How many stop signals have arrived so far.
  int count() const;

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

// "SIGTERM", "SIGINT", ... for logs.
const char* signal_name(int signal);

}  // namespace effectfence::mcp
