#include "tasksup/runtime/output_capture.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

using tasksup::runtime::output_capture;
using tasksup::runtime::output_capture_limits;

namespace {

// A fresh directory under $TMPDIR (or /tmp), removed at scope exit.
struct temp_dir {
  std::string path;

  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
      std::string{base != nullptr ? base : "/tmp"} + "/tasksup-capture-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }

  ~temp_dir() {
    std::string cmd = "rm -rf '" + path + "'";
    [[maybe_unused]] auto rc = std::system(cmd.c_str());
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

// Collects every delivered line or piece.
struct collector {
  std::vector<std::string> lines;
  std::vector<tasksup::runtime::output_stream> streams;
  /// What the callback answers: false asks the reader to pause.
  bool accept = true;

  output_capture::line_callback callback() {
    return
      [this](tasksup::runtime::output_stream stream, std::string_view line) {
        lines.emplace_back(line);
        streams.push_back(stream);
        return accept;
      };
  }
};

output_capture make(collector& c, std::string log = {},
                    output_capture_limits limits = {}) {
  auto cap = output_capture::create(std::move(log), c.callback(), limits);
  REQUIRE(cap.has_value());
  return std::move(cap).value();
}

} // namespace

TEST_CASE("output capture splits lines at LF and CRLF") {
  collector c;
  auto cap = make(c);
  cap.feed("one\ntwo\r\nthree\rstill three\n\nlast");
  CHECK(c.lines ==
        std::vector<std::string>{"one", "two", "three\rstill three", ""});
  cap.finish();
  CHECK(c.lines.back() == "last");
  CHECK(cap.tail() == std::vector<std::string>{
                        "one", "two", "three\rstill three", "", "last"});
}

TEST_CASE("output capture joins lines split across reads") {
  collector c;
  auto cap = make(c);
  std::string input = "alpha\r\nbeta\ngamma delta\r\n";
  for (char ch : input)
    cap.feed(std::string_view{&ch, 1});
  cap.finish();
  CHECK(c.lines == std::vector<std::string>{"alpha", "beta", "gamma delta"});
}

// No delivery limits: everything reaches the callback.
output_capture_limits unlimited() {
  output_capture_limits limits;
  limits.line_bytes = 0;
  limits.attempt_bytes = 0;
  limits.log_bytes = 0;
  return limits;
}

TEST_CASE("output capture delivers over-long lines in bounded pieces") {
  collector c;
  temp_dir dir;
  auto log = dir.path + "/output.log";
  auto cap = make(c, log, unlimited());
  std::string line;
  for (std::size_t i = 0; i < 1024 * 1024; ++i)
    line.push_back(static_cast<char>('a' + i % 26));
  cap.feed(line.substr(0, 1000));
  cap.feed(line.substr(1000));
  cap.feed("\nafter\n");
  cap.finish();
  REQUIRE(c.lines.size() == 1024 * 1024 / (64 * 1024) + 1);
  std::string joined;
  for (std::size_t i = 0; i + 1 < c.lines.size(); ++i) {
    CHECK(c.lines[i].size() <= 64 * 1024);
    joined += c.lines[i];
  }
  CHECK(joined == line);
  CHECK(c.lines.back() == "after");
  // The tail keeps one entry per line: the long line's first 4 KiB.
  auto tail = cap.tail();
  REQUIRE(tail.size() == 2);
  CHECK(tail[0] == line.substr(0, 4096));
  CHECK(tail[1] == "after");
  CHECK(read_all(log) == line + "\nafter\n");
}

TEST_CASE("output capture treats a piece boundary before CRLF as line end") {
  collector c;
  output_capture_limits limits;
  limits.max_piece_bytes = 4;
  auto cap = make(c, {}, limits);
  cap.feed("abcd\r\nabcd\nabc\r\nabcdefgh\r\n");
  cap.finish();
  CHECK(c.lines ==
        std::vector<std::string>{"abcd", "abcd", "abc", "abcd", "efgh"});
  CHECK(cap.tail() == std::vector<std::string>{"abcd", "abcd", "abc", "abcd"});
}

TEST_CASE("output capture keeps binary bytes unchanged") {
  collector c;
  temp_dir dir;
  auto log = dir.path + "/output.log";
  auto cap = make(c, log);
  std::string binary{"\x00\x01\xff\xfe\x7f bin\x00"
                     "ary",
                     13};
  std::string input = binary + "\n" + binary;
  cap.feed(input);
  cap.finish();
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[0] == binary);
  CHECK(c.lines[1] == binary);
  CHECK(cap.tail() == std::vector<std::string>{binary, binary});
  CHECK(read_all(log) == input);
  CHECK(cap.bytes_seen() == input.size());
}

TEST_CASE("output capture keeps a bounded tail of the newest lines") {
  collector c;
  auto cap = make(c, {}, unlimited());
  std::string long_line(10000, 'x');
  for (int i = 0; i < 1000; ++i)
    cap.feed("line " + std::to_string(i) + " " + long_line + "\n");
  cap.finish();
  CHECK(c.lines.size() == 1000);
  auto tail = cap.tail();
  REQUIRE(tail.size() == 256);
  for (std::size_t i = 0; i < tail.size(); ++i) {
    CHECK(tail[i].size() == 4096);
    CHECK(tail[i].rfind("line " + std::to_string(744 + i) + " ", 0) == 0);
  }
}

TEST_CASE("output capture writes nothing after finish") {
  collector c;
  temp_dir dir;
  auto log = dir.path + "/output.log";
  auto cap = make(c, log);
  cap.feed("partial");
  cap.finish();
  cap.feed("ignored\n");
  cap.finish();
  CHECK(c.lines == std::vector<std::string>{"partial"});
  CHECK(read_all(log) == "partial");
  CHECK(cap.log_error().empty());
  CHECK(cap.log_path() == log);
}

TEST_CASE("output capture reports a log file it cannot open") {
  collector c;
  temp_dir dir;
  auto log = dir.path + "/missing/output.log";
  auto cap = output_capture::create(log, c.callback());
  REQUIRE_FALSE(cap.has_value());
  CHECK(cap.error().to_string().find(log) != std::string::npos);
  CHECK(cap.error().to_string().find("No such file") != std::string::npos);
}

TEST_CASE("output capture rejects a zero piece size") {
  output_capture_limits limits;
  limits.max_piece_bytes = 0;
  auto cap = output_capture::create({}, {}, limits);
  CHECK_FALSE(cap.has_value());
}

TEST_CASE("output capture keeps stdout and stderr lines apart") {
  using tasksup::runtime::output_stream;
  collector c;
  temp_dir dir;
  auto log = dir.path + "/output.log";
  auto cap = make(c, log);
  // Partial lines of both streams interleave; each stream's line stays whole.
  cap.feed(output_stream::out, "answer: ");
  cap.feed(output_stream::err, "warning: slow");
  cap.feed(output_stream::out, "42\n");
  cap.feed(output_stream::err, "\n");
  cap.finish();
  CHECK(c.lines == std::vector<std::string>{"answer: 42", "warning: slow"});
  CHECK(c.streams ==
        std::vector<output_stream>{output_stream::out, output_stream::err});
  CHECK(cap.tail() == std::vector<std::string>{"answer: 42", "warning: slow"});
  CHECK(read_all(log) == "answer: warning: slow42\n\n");
}

TEST_CASE("output capture holds back what passes the delivery limits and "
          "counts it") {
  collector c;
  auto limits = unlimited();
  limits.line_bytes = 10;
  limits.attempt_bytes = 25;
  auto cap = make(c, {}, limits);
  // 30 bytes on one line: 10 shown, 20 held back.
  cap.feed(std::string(30, 'a') + "\n");
  cap.feed("short\n");      // 5 shown (15 so far)
  cap.feed("0123456789\n"); // 10 shown: the attempt's 25 are reached
  cap.feed("late one\nlate two\n");
  cap.finish();
  std::string shown;
  for (auto& l : c.lines)
    shown += l + "|";
  CHECK(shown == "aaaaaaaaaa|short|0123456789|");
  CHECK(cap.bytes_held_back() == 20 + 8 + 8);
  CHECK(cap.lines_held_back() == 3);
  // The classifier still sees the real last lines.
  auto tail = cap.tail();
  REQUIRE(tail.size() == 5);
  CHECK(tail[3] == "late one");
  CHECK(tail[4] == "late two");
  CHECK(cap.summary().find("36 bytes of output in 3 lines were not shown") !=
        std::string::npos);
}

TEST_CASE("output capture cuts a huge line to its limit without keeping it") {
  collector c;
  auto limits = unlimited();
  limits.line_bytes = 100;
  auto cap = make(c, {}, limits);
  std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 64; ++i) // 4 MiB without a newline
    cap.feed(chunk);
  cap.feed("\nend\n");
  cap.finish();
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[0] == std::string(100, 'x'));
  CHECK(c.lines[1] == "end");
  CHECK(cap.bytes_held_back() == 64 * chunk.size() - 100);
  CHECK(cap.tail().back() == "end");
}

TEST_CASE("output capture caps its log file and says so in it") {
  collector c;
  temp_dir dir;
  auto log = dir.path + "/output.log";
  auto limits = unlimited();
  limits.log_bytes = 16;
  auto cap = make(c, log, limits);
  cap.feed("0123456789\n");
  cap.feed("abcdefghij\n");
  cap.feed("more\n");
  cap.finish();
  auto text = read_all(log);
  CHECK(text.rfind("0123456789\nabcde\n[tasksup: output.log reached its cap "
                   "of 16 bytes",
                   0) == 0);
  CHECK(text.find("[tasksup: 11 more bytes of output were not logged]\n") !=
        std::string::npos);
  CHECK(cap.bytes_not_logged() == 11);
  CHECK(c.lines.size() == 3); // the log's cap does not limit delivery
  CHECK(cap.summary().find("11 bytes were not logged") != std::string::npos);
}

TEST_CASE("output capture asks to pause when the receiver is full") {
  collector c;
  auto cap = make(c);
  cap.feed("one\n");
  CHECK_FALSE(cap.full());
  c.accept = false;
  cap.feed("two\n");
  CHECK(cap.full());
  cap.resume();
  CHECK_FALSE(cap.full());
  c.accept = true;
  cap.feed("three\n");
  CHECK_FALSE(cap.full());
  CHECK(c.lines == std::vector<std::string>{"one", "two", "three"});
}
