#include "mcp/line_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace effectfence::mcp {

LineSplitter::LineSplitter(size_t max_bytes, size_t kept_prefix_bytes)
    : max_bytes_(max_bytes), kept_prefix_bytes_(std::min(kept_prefix_bytes, max_bytes)) {}

namespace {

// Appends bytes to tail, keeping only its last `keep` bytes.
void keep_last(std::string& tail, std::string_view bytes, size_t keep) {
  if (bytes.size() >= keep) {
    tail.assign(bytes.substr(bytes.size() - keep));
    return;
  }
  tail.append(bytes);
  if (tail.size() > keep) tail.erase(0, tail.size() - keep);
}

}  // namespace

void LineSplitter::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    const std::string_view chunk = bytes.substr(0, newline);
    if (discarding_) {
      keep_last(tail_, chunk, kOversizedTailBytes + 1);  // + a CR that may end it
    } else if (pending_.size() + chunk.size() > max_bytes_ + 1) {
      // One byte of slack: a line of exactly the limit may end in "\r\n".
      keep_last(tail_, pending_, kOversizedTailBytes + 1);
      keep_last(tail_, chunk, kOversizedTailBytes + 1);
      const size_t room = kept_prefix_bytes_ > pending_.size() ? kept_prefix_bytes_ - pending_.size() : 0;
      pending_.append(chunk.substr(0, room));
      pending_.resize(std::min(pending_.size(), kept_prefix_bytes_));
      discarding_ = true;
    } else {
      pending_.append(chunk);
    }
    if (newline == std::string_view::npos) return;
    end_line();
    bytes.remove_prefix(newline + 1);
  }
}

void LineSplitter::end_line() {
  if (discarding_) {
    if (!tail_.empty() && tail_.back() == '\r') tail_.pop_back();
    keep_last(tail_, "", kOversizedTailBytes);
    ready_.push_back(Line{std::move(pending_), true, std::move(tail_)});
  } else {
    if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
    const bool too_long = pending_.size() > max_bytes_;  // the slack byte was not a CR
    std::string tail;
    if (too_long) {
      keep_last(tail, pending_, kOversizedTailBytes);
      pending_.resize(kept_prefix_bytes_);
    }
    ready_.push_back(Line{std::move(pending_), too_long, std::move(tail)});
  }
  pending_.clear();
  tail_.clear();
  discarding_ = false;
}

std::optional<Line> LineSplitter::next() {
  if (ready_.empty()) return std::nullopt;
  Line line = std::move(ready_.front());
  ready_.pop_front();
  return line;
}

std::optional<Line> LineSplitter::finish() {
  if (auto line = next()) return line;
  if (!discarding_ && pending_.empty()) return std::nullopt;
  end_line();
  return next();
}

namespace {

// What a writer that exited left in the pipe is read to the end; a process
// it started that keeps writing is not waited for beyond this many reads.
constexpr int kMaxReadsAfterWriterExit = 1024;

}  // namespace

FdLineReader::FdLineReader(int fd, int stop_fd, size_t max_bytes, int writer_exit_fd)
    : fd_(fd), stop_fd_(stop_fd), writer_exit_fd_(writer_exit_fd), splitter_(max_bytes) {}

bool FdLineReader::stop_fired() const {
  if (stop_fd_ < 0) return false;
  pollfd stop = {stop_fd_, POLLIN, 0};
  return ::poll(&stop, 1, 0) == 1 && (stop.revents & (POLLIN | POLLHUP | POLLERR));
}

ReadEvent FdLineReader::next(Line* line) {
  for (;;) {
    // Lines one read() brought in together are not let through after a
    // signal either: each could be admitted with nobody left to commit it.
    if (stop_fired()) return ReadEvent::stopped;
    if (auto ready = splitter_.next()) {
      *line = std::move(*ready);
      return ReadEvent::line;
    }
    if (at_eof_) {
      if (auto rest = splitter_.finish()) {
        *line = std::move(*rest);
        return ReadEvent::line;
      }
      return ReadEvent::eof;
    }

    // poll() skips entries whose fd is negative.
    pollfd fds[3] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {writer_exit_fd_, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      at_eof_ = true;
      continue;
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) return ReadEvent::stopped;
    const bool writer_gone = fds[2].revents != 0;
    if (fds[0].revents != 0 && !(writer_gone && ++reads_since_writer_exit_ > kMaxReadsAfterWriterExit)) {
      at_eof_ = !read_more();
    } else if (writer_gone) {
      writer_exited_ = true;
      at_eof_ = true;
    }
  }
}

bool FdLineReader::read_more() {
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n > 0) {
      splitter_.feed(std::string_view(buffer, static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // end of input, or an input that failed: either way no more lines
  }
}

namespace {

bool is_socket(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

LineWriter::LineWriter(int fd, int stop_fd, std::chrono::milliseconds stop_grace)
    : fd_(fd), stop_fd_(stop_fd), stop_grace_(stop_grace), socket_(is_socket(fd)) {}

ssize_t LineWriter::write_some(const char* p, size_t n) const {
  return socket_ ? ::send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : ::write(fd_, p, n);
}

bool LineWriter::broken() const {
  MutexLock lock(&mutex_);
  return broken_;
}

bool LineWriter::write_line(std::string_view line, bool* nothing_written) {
  std::string framed;
  framed.reserve(line.size() + 1);
  framed.append(line);
  framed += '\n';

  MutexLock lock(&mutex_);
  const char* p = framed.data();
  size_t left = framed.size();
  const auto fail = [&]() REQUIRES(mutex_) {
    broken_ = true;  // a line stopped halfway: nothing after it can be framed
    if (nothing_written) *nothing_written = left == framed.size();
    // Only the newline missing: a reader that takes the end of its input
    // for the end of a line has the whole message, so it is not unsent.
    return left == 1;
  };
  if (nothing_written) *nothing_written = false;
  if (broken_) return fail();
  while (left > 0) {
    const ssize_t n = write_some(p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd waits[2] = {{fd_, POLLOUT, 0}, {stop_fd_, POLLIN, 0}};
      ::poll(waits, stop_fd_ >= 0 ? 2 : 1, -1);
      if (stop_fd_ >= 0 && (waits[1].revents & POLLIN) && !(waits[0].revents & POLLOUT)) {
        // A reader still reading gets the rest; one that does not, stop_grace.
        pollfd room = {fd_, POLLOUT, 0};
        if (stop_grace_.count() > 0 && ::poll(&room, 1, static_cast<int>(stop_grace_.count())) == 1) continue;
        return fail();
      }
      continue;
    }
    if (n <= 0) return fail();
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace effectfence::mcp
