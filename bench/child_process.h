// A child process spoken to in newline-delimited messages over two pipes,
// from a single thread: writes never block, so a full pipe in one direction
// cannot deadlock against a full pipe in the other.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace effectfence::bench {

// One field of a /proc/.../io file ("write_bytes:", "syscr:"), or -1 where
// the kernel does not say.
double proc_io_field(const std::string& path, const std::string& field);

// From /proc/PID/task/TID/schedstat: time on a CPU, and time runnable but
// waiting for one (what other processes on a busy machine cost us); from
// /proc/PID/task/TID/io, the read calls it made (a ledger's pages its cache
// did not hold, when it is the ledger's writer), or -1 where unknown.
struct ThreadTimes {
  std::string name;  // what the thread calls itself (/proc/.../comm)
  double cpu_s = 0;
  double runqueue_wait_s = 0;
  double read_calls = -1;
};

class ChildProcess {
 public:
  // Starts argv[0] with argv; its stdin and stdout are pipes to us, its
  // stderr goes to stderr_path (truncated).
  ChildProcess(const std::vector<std::string>& argv, const std::string& stderr_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Queues one message; it is written by the next pump().
  void send_line(const std::string& line);

  // Writes what the pipe accepts and waits up to `timeout` for input.
  // Appends every complete line received; returns false once stdout closed.
  bool pump(std::chrono::milliseconds timeout, std::vector<std::string>* lines);

  // Closes its stdin (the request to stop), waits for it and returns its
  // exit status as the shell reports it (128 + signal if killed).
  int finish();

  // CPU time (user + system) the child has used so far, in seconds.
  double cpu_seconds() const;

  // Bytes its writes have sent towards the disk so far (/proc/PID/io
  // write_bytes: counted as page-cache pages are dirtied), or -1 where the
  // kernel does not say.
  double disk_write_bytes() const;

  // The same, thread by thread, with the time each waited for a CPU.
  std::map<pid_t, ThreadTimes> thread_times() const;

  pid_t pid() const { return pid_; }

 private:
  void flush_output();
  bool read_input(std::vector<std::string>* lines);

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string outgoing_;
  size_t outgoing_sent_ = 0;
  std::string incoming_;
  bool exited_ = false;
};

// CPU time (user + system) this process has used so far, in seconds.
double own_cpu_seconds();

}  // namespace effectfence::bench
