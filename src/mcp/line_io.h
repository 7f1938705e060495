// Newline-delimited framing over file descriptors (MCP stdio transport).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "core/mutex.h"

namespace effectfence::mcp {

// The largest message accepted, in bytes, excluding the newline. A longer
// line is answered with "message too large" and skipped; the stream goes on.
constexpr size_t kMaxMessageBytes = 4 * 1024 * 1024;
// How much of an oversized line is kept, so its request id can still be
// recovered and the error answered to the right request.
constexpr size_t kOversizedPrefixBytes = 64 * 1024;
// And how much of its end: writers that put the id last (the TypeScript
// SDK) can be answered too.
constexpr size_t kOversizedTailBytes = 1024;

struct Line {
  std::string text;       // without "\n" (and without a trailing "\r")
  bool too_long = false;  // text then holds only the line's first bytes
  std::string tail;       // too_long: the line's last bytes (without "\r")
};

// Splits a byte stream into lines of at most max_bytes. An oversized line is
// reported once, when it ends (its newline, or the end of input), with its
// first and last bytes; what lies between is discarded without being
// buffered.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_bytes = kMaxMessageBytes,
                        size_t kept_prefix_bytes = kOversizedPrefixBytes);

  void feed(std::string_view bytes);
  // Returns the next complete line, if any.
  std::optional<Line> next();
  // At end of input: the unterminated rest as a last line, if there is one.
  std::optional<Line> finish();

 private:
  void end_line();

  const size_t max_bytes_;
  const size_t kept_prefix_bytes_;
  std::string pending_;
  bool discarding_ = false;  // pending_ holds an oversized line's prefix
  std::string tail_;         // while discarding: the last bytes seen
  std::deque<Line> ready_;
};

enum class ReadEvent { line, eof, stopped };

// Reads lines from fd. stop_fd (or -1) is polled alongside: once it is
// readable, next() returns stopped even if more input is waiting, so a
// signal stops intake at once. writer_exit_fd (or -1) is readable once the
// process writing fd has exited (a pidfd): the input then ends as soon as
// nothing more is waiting in fd, although a process it started may hold fd
// open for as long as it lives.
class FdLineReader {
 public:
  FdLineReader(int fd, int stop_fd, size_t max_bytes = kMaxMessageBytes, int writer_exit_fd = -1);

  // Blocks until a line is ready, the input ends (or fails) or stop_fd fires.
  ReadEvent next(Line* line);

  // True iff the input ended because its writer exited, not at end of file.
  bool writer_exited() const { return writer_exited_; }

 private:
  // Returns false at end of input.
  bool read_more();
  // True iff stop_fd is readable now.
  bool stop_fired() const;

  const int fd_;
  const int stop_fd_;
  const int writer_exit_fd_;
  LineSplitter splitter_;
  bool at_eof_ = false;
  bool writer_exited_ = false;
  int reads_since_writer_exit_ = 0;
};

// Writes whole lines to fd; lines of concurrent callers never interleave.
// REQUIRES: SIGPIPE ignored, so a vanished reader is an error, not a death.
class LineWriter {
 public:
  // With a stop_fd (and fd a socket, or non-blocking), a write waiting for a
  // reader that does not read gives up once stop_fd is readable (after
  // waiting up to stop_grace for the reader to make room), and the writer is
  // then broken: whoever stops it is never left waiting on the other side.
  // A socket (what Node gives a child as its stdio) is written with
  // MSG_DONTWAIT, leaving its shared description's flags alone.
  explicit LineWriter(int fd, int stop_fd = -1,
                      std::chrono::milliseconds stop_grace = std::chrono::milliseconds(0));

  // Writes line and "\n". Returns false iff the output is broken before all
  // of line went out (a line whose newline alone was lost counts as
  // written: a reader may take its end of input for the end of the line);
  // from then on every write is dropped. nothing_written (if given) is set
  // to whether a failed line left no byte at all: a reader may still get a
  // line that went out in part.
  bool write_line(std::string_view line, bool* nothing_written = nullptr);
  // True once a write failed: nothing written from then on reaches the reader.
  bool broken() const;

 private:
  // One write(2), or send(2) without blocking on a socket.
  ssize_t write_some(const char* p, size_t n) const;

  const int fd_;
  const int stop_fd_;
  const std::chrono::milliseconds stop_grace_;
  const bool socket_;
  mutable Mutex mutex_;
  bool broken_ GUARDED_BY(mutex_) = false;
};

}  // namespace effectfence::mcp
