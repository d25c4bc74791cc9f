#include "log_tail.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

using tasksup::app::log_tail;
using lines = std::vector<std::string>;

TEST_CASE("log_tail keeps the last lines, oldest first") {
  log_tail tail{3, 100};
  tail.feed("one\ntwo\nthree\nfour\nfive\n");
  tail.finish();
  CHECK(tail.lines() == lines{"three", "four", "five"});
  CHECK(tail.total_lines() == 5);
}

TEST_CASE("log_tail joins lines split across chunks") {
  log_tail tail{10, 100};
  for (std::string_view chunk : {"he", "llo\nwor", "ld", "\n", "\nlast"})
    tail.feed(chunk);
  tail.finish();
  CHECK(tail.lines() == lines{"hello", "world", "", "last"});
}

TEST_CASE("log_tail drops a trailing carriage return") {
  log_tail tail{10, 100};
  tail.feed("dos\r\nmid\rdle\r\n");
  tail.finish();
  CHECK(tail.lines() == lines{"dos", "mid\rdle"});
}

TEST_CASE("log_tail cuts long lines to the bound") {
  log_tail tail{2, 4};
  tail.feed("abcdefgh");
  tail.feed("ijk\nxy\n");
  tail.finish();
  CHECK(tail.lines() == lines{"abcd", "xy"});
  CHECK(tail.truncated_lines() == 1);
}

TEST_CASE("log_tail: empty input has no lines, an unterminated one counts") {
  log_tail empty{5, 10};
  empty.finish();
  CHECK(empty.lines().empty());
  CHECK(empty.total_lines() == 0);
  log_tail partial{5, 10};
  partial.feed("no newline");
  partial.finish();
  CHECK(partial.lines() == lines{"no newline"});
}

TEST_CASE("log_tail keeps binary bytes as they are") {
  log_tail tail{5, 10};
  tail.feed(std::string_view{"a\0b\xff\nz", 6});
  tail.finish();
  CHECK(tail.lines() == lines{std::string{"a\0b\xff", 4}, "z"});
}

TEST_CASE("read_into reads a whole file") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  std::string content;
  for (int i = 0; i < 100000; ++i)
    content += "line " + std::to_string(i) + "\n";
  std::fwrite(content.data(), 1, content.size(), file);
  std::rewind(file);
  log_tail tail{2, 100};
  CHECK(tasksup::app::read_into(file, tail).empty());
  std::fclose(file);
  CHECK(tail.lines() == lines{"line 99998", "line 99999"});
  CHECK(tail.total_lines() == 100000);
}
