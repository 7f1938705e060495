#include "mcp/line_io.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using effectfence::mcp::FdLineReader;
using effectfence::mcp::Line;
using effectfence::mcp::LineSplitter;
using effectfence::mcp::LineWriter;
using effectfence::mcp::ReadEvent;

namespace {

std::vector<Line> drain(LineSplitter& splitter) {
  std::vector<Line> lines;
  while (auto line = splitter.next()) lines.push_back(*line);
  return lines;
}

struct Pipe {
  int read_fd = -1, write_fd = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (read_fd >= 0) ::close(read_fd);
    read_fd = -1;
  }
  void close_write() {
    if (write_fd >= 0) ::close(write_fd);
    write_fd = -1;
  }
  void write(const std::string& text) const { REQUIRE(::write(write_fd, text.data(), text.size()) == ssize_t(text.size())); }
};

}  // namespace

TEST_CASE("LineSplitter joins chunks into lines and strips CR", "[line_io]") {
  LineSplitter splitter(100);
  splitter.feed("{\"a\"");
  CHECK_FALSE(splitter.next());
  splitter.feed(":1}\r\n{\"b\":2}\n{\"c\"");
  auto lines = drain(splitter);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].text == "{\"a\":1}");
  CHECK(lines[1].text == "{\"b\":2}");
  CHECK_FALSE(lines[0].too_long);
  auto last = splitter.finish();
  REQUIRE(last);
  CHECK(last->text == "{\"c\"");
  CHECK_FALSE(splitter.finish());
}

TEST_CASE("LineSplitter accepts a line of exactly the limit, ended by LF or CRLF", "[line_io]") {
  LineSplitter splitter(8, 4);
  splitter.feed("12345678\n");
  splitter.feed("abcdefgh\r\n");
  splitter.feed("123456789\n");  // one over: the slack byte is not a CR
  auto lines = drain(splitter);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].text == "12345678");
  CHECK_FALSE(lines[0].too_long);
  CHECK(lines[1].text == "abcdefgh");
  CHECK_FALSE(lines[1].too_long);
  CHECK(lines[2].too_long);
  CHECK(lines[2].text == "1234");
  CHECK(lines[2].tail == "123456789");
}

TEST_CASE("LineSplitter reports an oversized line once, at its end, with its start and its end, and goes on",
          "[line_io]") {
  LineSplitter splitter(8, 4);
  splitter.feed("1234567890");  // over the limit (and its CR slack) before its newline arrives
  CHECK(drain(splitter).empty());
  splitter.feed(std::string(3000, 'x'));
  CHECK(drain(splitter).empty());
  splitter.feed("\"id\":7}\r\nok\n");
  auto after = drain(splitter);
  REQUIRE(after.size() == 2);
  CHECK(after[0].too_long);
  CHECK(after[0].text == "1234");
  CHECK(after[0].tail.size() == effectfence::mcp::kOversizedTailBytes);
  CHECK_THAT(after[0].tail, Catch::EndsWith("xxx\"id\":7}"));
  CHECK(after[1].text == "ok");
  CHECK_FALSE(after[1].too_long);
  CHECK(after[1].tail.empty());
}

TEST_CASE("LineSplitter reports an oversized line cut by the end of input once, at the end", "[line_io]") {
  LineSplitter splitter(4);
  splitter.feed("123456");
  CHECK(drain(splitter).empty());
  auto last = splitter.finish();
  REQUIRE(last);
  CHECK(last->too_long);
  CHECK(last->tail == "123456");
  CHECK_FALSE(splitter.finish());
}

TEST_CASE("FdLineReader reads lines then EOF, including an unterminated last line", "[line_io]") {
  Pipe input;
  input.write("one\ntwo\nthree");
  input.close_write();
  FdLineReader reader(input.read_fd, -1);
  Line line;
  std::vector<std::string> got;
  while (reader.next(&line) == ReadEvent::line) got.push_back(line.text);
  CHECK(got == std::vector<std::string>{"one", "two", "three"});
  CHECK(reader.next(&line) == ReadEvent::eof);
}

TEST_CASE("FdLineReader stops when the stop fd fires, even with input waiting", "[line_io]") {
  Pipe input, stop;
  FdLineReader reader(input.read_fd, stop.read_fd);
  input.write("first\n");
  Line line;
  REQUIRE(reader.next(&line) == ReadEvent::line);
  CHECK(line.text == "first");
  stop.write("x");
  input.write("second\n");
  CHECK(reader.next(&line) == ReadEvent::stopped);
}

TEST_CASE("FdLineReader stops when the stop fd fires, even with lines of one read still held", "[line_io]") {
  Pipe input, stop;
  FdLineReader reader(input.read_fd, stop.read_fd);
  input.write("first\nsecond\nthird\n");  // one read() takes all three
  Line line;
  REQUIRE(reader.next(&line) == ReadEvent::line);
  CHECK(line.text == "first");
  stop.write("x");
  CHECK(reader.next(&line) == ReadEvent::stopped);
}

TEST_CASE("FdLineReader wakes from a blocking wait when the stop fd fires", "[line_io]") {
  Pipe input, stop;
  FdLineReader reader(input.read_fd, stop.read_fd);
  // No Catch assertions off the main thread: they are not thread-safe.
  std::thread stopper([&] { [[maybe_unused]] ssize_t n = ::write(stop.write_fd, "x", 1); });
  Line line;
  CHECK(reader.next(&line) == ReadEvent::stopped);
  stopper.join();
}

TEST_CASE("LineWriter never interleaves lines of concurrent writers", "[line_io]") {
  Pipe pipe;
  LineWriter writer(pipe.write_fd);
  constexpr int kThreads = 8, kLines = 200;
  const std::string body(5000, 'y');  // bigger than PIPE_BUF: a single write is not atomic by itself
  std::string received;
  std::thread reader([&] {
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(pipe.read_fd, buffer, sizeof buffer)) > 0) received.append(buffer, size_t(n));
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) writer.write_line(std::to_string(t) + ":" + std::to_string(i) + ":" + body);
    });
  }
  for (auto& w : writers) w.join();
  pipe.close_write();
  reader.join();

  LineSplitter splitter(1 << 20);
  splitter.feed(received);
  std::set<std::string> seen;
  while (auto line = splitter.next()) {
    const auto second_colon = line->text.find(':', line->text.find(':') + 1);
    REQUIRE(second_colon != std::string::npos);
    REQUIRE(line->text.substr(second_colon + 1) == body);
    seen.insert(line->text.substr(0, second_colon));
  }
  CHECK(seen.size() == size_t(kThreads * kLines));
}

TEST_CASE("LineWriter reports a vanished reader instead of dying", "[line_io]") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe pipe;
  pipe.close_read();
  LineWriter writer(pipe.write_fd);
  bool nothing_written = false;
  CHECK_FALSE(writer.write_line("nobody listens", &nothing_written));
  CHECK(nothing_written);  // so its content reached nobody: a ticket in it may be withdrawn
  CHECK(writer.broken());
  nothing_written = false;
  CHECK_FALSE(writer.write_line("still nobody", &nothing_written));
  CHECK(nothing_written);
}

TEST_CASE("LineWriter counts a line whose newline alone was lost as written: its reader may have it whole",
          "[line_io]") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe pipe;
  REQUIRE(::fcntl(pipe.write_fd, F_SETPIPE_SZ, 4096) == 4096);
  REQUIRE(::fcntl(pipe.write_fd, F_SETFL, ::fcntl(pipe.write_fd, F_GETFL) | O_NONBLOCK) == 0);
  LineWriter writer(pipe.write_fd);
  const std::string message(4096, 'a');  // fills the pipe: its newline has to wait for room
  bool written = false;
  bool nothing_written = true;
  std::thread writing([&] { written = writer.write_line(message, &nothing_written); });
  // Once the message fills the pipe, the reader goes before its newline comes.
  int queued = 0;
  for (int i = 0; i < 1000 && queued < 4096; ++i) {
    REQUIRE(::ioctl(pipe.read_fd, FIONREAD, &queued) == 0);
    if (queued < 4096) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(queued == 4096);
  pipe.close_read();
  writing.join();
  CHECK(written);
  CHECK_FALSE(nothing_written);
  CHECK(writer.broken());
  CHECK_FALSE(writer.write_line("after it"));
}

TEST_CASE("LineWriter gives up a write nobody reads once its stop fd fires, and stays broken", "[line_io]") {
  Pipe out;  // nobody reads it: a write larger than the pipe waits
  Pipe stop;
  const int flags = ::fcntl(out.write_fd, F_GETFL);
  REQUIRE(::fcntl(out.write_fd, F_SETFL, flags | O_NONBLOCK) == 0);
  LineWriter writer(out.write_fd, stop.read_fd);
  bool written = true;
  bool nothing_written = true;
  std::thread blocked([&] { written = writer.write_line(std::string(1 << 20, 'x'), &nothing_written); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(::write(stop.write_fd, "x", 1) == 1);
  blocked.join();  // returns: the stop fd ended the wait
  CHECK_FALSE(written);
  CHECK_FALSE(nothing_written);  // the pipe took part of it: a reader may still see that part
  CHECK(writer.broken());
  CHECK_FALSE(writer.write_line("after a half-written line nothing can be framed", &nothing_written));
  CHECK(nothing_written);
}

TEST_CASE("LineWriter on a blocking socket nobody reads gives up once its stop fd fires, its flags untouched",
          "[line_io]") {
  int sockets[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) == 0);  // as Node hands a child its stdio
  Pipe stop;
  LineWriter writer(sockets[0], stop.read_fd);
  bool written = true;
  std::thread blocked([&] { written = writer.write_line(std::string(8 << 20, 'x')); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(::write(stop.write_fd, "x", 1) == 1);
  blocked.join();  // returns: the stop fd ended the wait
  CHECK_FALSE(written);
  CHECK(writer.broken());
  CHECK((::fcntl(sockets[0], F_GETFL) & O_NONBLOCK) == 0);  // whoever shares it still blocks
  ::close(sockets[0]);
  ::close(sockets[1]);
}
