#include "child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace effectfence::bench {
namespace {

[[noreturn]] void fail_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail_errno("fcntl");
}

// Runs in the forked child, so only async-signal-safe calls.
[[noreturn]] void exec_child(char* const argv[], int stdin_fd, int stdout_fd, const char* stderr_path) {
  const int err = ::open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || err < 0 || ::dup2(err, 2) < 0) ::_exit(126);
  ::execv(argv[0], argv);
  ::_exit(127);
}

double timeval_seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; }

}  // namespace

double proc_io_field(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  for (std::string name; in >> name;) {
    double value = 0;
    if (!(in >> value)) break;
    if (name == field) return value;
  }
  return -1;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& stderr_path) {
  int in[2];
  int out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) fail_errno("pipe");
  if (::pipe2(out, O_CLOEXEC) != 0) fail_errno("pipe");
  // Built before fork: the child may not allocate.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_ = ::fork();
  if (pid_ < 0) fail_errno("fork");
  if (pid_ == 0) exec_child(args.data(), in[0], out[1], stderr_path.c_str());
  ::close(in[0]);
  ::close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  set_nonblocking(to_child_);
  set_nonblocking(from_child_);
}

ChildProcess::~ChildProcess() {
  if (!exited_) {
    ::kill(pid_, SIGKILL);
    finish();
  }
}

void ChildProcess::send_line(const std::string& line) {
  outgoing_ += line;
  outgoing_ += '\n';
}

bool ChildProcess::pump(std::chrono::milliseconds timeout, std::vector<std::string>* lines) {
  flush_output();
  pollfd fds[2] = {{from_child_, POLLIN, 0}, {to_child_, POLLOUT, 0}};
  const nfds_t count = outgoing_sent_ < outgoing_.size() ? 2 : 1;
  const int ready = ::poll(fds, count, static_cast<int>(timeout.count()));
  if (ready < 0 && errno != EINTR) fail_errno("poll");
  if (ready <= 0) return true;
  if (count == 2 && (fds[1].revents & (POLLOUT | POLLERR))) flush_output();
  if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) return read_input(lines);
  return true;
}

void ChildProcess::flush_output() {
  while (outgoing_sent_ < outgoing_.size()) {
    const ssize_t n = ::write(to_child_, outgoing_.data() + outgoing_sent_, outgoing_.size() - outgoing_sent_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      fail_errno("write to the server");
    }
    outgoing_sent_ += static_cast<size_t>(n);
  }
  outgoing_.clear();
  outgoing_sent_ = 0;
}

bool ChildProcess::read_input(std::vector<std::string>* lines) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(from_child_, buffer, sizeof buffer);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      fail_errno("read from the server");
    }
    incoming_.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t end; (end = incoming_.find('\n', start)) != std::string::npos; start = end + 1) {
      lines->emplace_back(incoming_, start, end - start);
    }
    incoming_.erase(0, start);
  }
}

int ChildProcess::finish() {
  if (to_child_ >= 0) {
    ::close(to_child_);
    to_child_ = -1;
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exited_ = true;
  if (from_child_ >= 0) {
    ::close(from_child_);
    from_child_ = -1;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

double ChildProcess::cpu_seconds() const {
  // /proc/PID/stat: the fields after the parenthesised name start at field 3;
  // utime and stime are fields 14 and 15, in clock ticks.
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(name_end + 2));
  std::string field;
  double ticks = 0;
  for (int number = 3; number <= 15 && fields >> field; ++number) {
    if (number == 14 || number == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double ChildProcess::disk_write_bytes() const {
  return proc_io_field("/proc/" + std::to_string(pid_) + "/io", "write_bytes:");
}

std::map<pid_t, ThreadTimes> ChildProcess::thread_times() const {
  std::map<pid_t, ThreadTimes> threads;
  const std::string tasks = "/proc/" + std::to_string(pid_) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return threads;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = tasks + "/" + entry->d_name;
    std::ifstream in(task + "/schedstat");
    double run_ns = 0;
    double wait_ns = 0;
    if (in >> run_ns >> wait_ns) {
      std::string name;
      std::ifstream comm(task + "/comm");
      std::getline(comm, name);
      threads[static_cast<pid_t>(std::stol(entry->d_name))] =
          ThreadTimes{name, run_ns / 1e9, wait_ns / 1e9, proc_io_field(task + "/io", "syscr:")};
    }
  }
  ::closedir(dir);
  return threads;
}

double own_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return timeval_seconds(usage.ru_utime) + timeval_seconds(usage.ru_stime);
}

}  // namespace effectfence::bench
