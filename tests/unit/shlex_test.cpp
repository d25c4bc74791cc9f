#include "tasksup/supervisor/shlex.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using tasksup::shlex_split;
using words = std::vector<std::string>;

namespace {

words split_ok(std::string_view str) {
  auto res = shlex_split(str);
  INFO("input: " << str);
  REQUIRE(res.has_value());
  return *res;
}

std::string split_error(std::string_view str) {
  auto res = shlex_split(str);
  INFO("input: " << str);
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where.empty());
  CHECK(res.error().path.empty());
  return res.error().what;
}

} // namespace

TEST_CASE("shlex: unquoted whitespace separates words") {
  CHECK(split_ok("exec --full-auto") == words{"exec", "--full-auto"});
  CHECK(split_ok("  a \t b\n\nc  ") == words{"a", "b", "c"});
  CHECK(split_ok("").empty());
  CHECK(split_ok(" \t\n ").empty());
}

TEST_CASE("shlex: single quotes keep everything literal") {
  CHECK(split_ok(R"(-m 'hello  world')") == words{"-m", "hello  world"});
  CHECK(split_ok(R"('a\"b$c`d\')") == words{R"(a\"b$c`d\)"});
  CHECK(split_ok("'line\nbreak'") == words{"line\nbreak"});
}

TEST_CASE("shlex: double quotes honour only the four escapes") {
  CHECK(split_ok(R"("say \"hi\"")") == words{R"(say "hi")"});
  CHECK(split_ok(R"("a\\b \$HOME \`x\`")") == words{R"(a\b $HOME `x`)"});
  // Any other backslash stays, as in sh.
  CHECK(split_ok(R"("a\nb\'c")") == words{R"(a\nb\'c)"});
  CHECK(split_ok(R"("it's")") == words{"it's"});
}

TEST_CASE("shlex: a backslash outside quotes escapes the next character") {
  CHECK(split_ok(R"(a\ b c)") == words{"a b", "c"});
  CHECK(split_ok(R"(\'x\")") == words{R"('x")"});
  CHECK(split_ok(R"(\\)") == words{"\\"});
}

TEST_CASE("shlex: backslash-newline is a line continuation") {
  CHECK(split_ok("a\\\nb") == words{"ab"});
  CHECK(split_ok("a \\\n b") == words{"a", "b"});
  CHECK(split_ok("\"a\\\nb\"") == words{"ab"});
  CHECK(split_ok("''\\\n") == words{""});
}

TEST_CASE("shlex: quotes join with adjacent text into one word") {
  CHECK(split_ok(R"(--name="my agent"x 'a'"b"c)") ==
        words{"--name=my agentx", "abc"});
}

TEST_CASE("shlex: empty quotes are an empty argument") {
  CHECK(split_ok("'' \"\"") == words{"", ""});
  CHECK(split_ok("a '' b") == words{"a", "", "b"});
}

TEST_CASE("shlex: nothing is expanded") {
  CHECK(split_ok("$HOME ~ * $(rm -rf /) `id` a;b c|d") ==
        words{"$HOME", "~", "*", "$(rm", "-rf", "/)", "`id`", "a;b", "c|d"});
}

TEST_CASE("shlex: unbalanced quotes and a trailing backslash are errors") {
  CHECK(split_error("-p 'oops") == "unbalanced single quote at offset 3");
  CHECK(split_error(R"(a "b)") == "unbalanced double quote at offset 2");
  // An escaped quote inside double quotes does not close them.
  CHECK(split_error(R"("abc\")") == "unbalanced double quote at offset 0");
  CHECK(split_error(R"(abc\)") == "trailing backslash at offset 3");
}

TEST_CASE("shlex: binary bytes pass through unchanged") {
  std::string input{"a\x01\xff b"};
  CHECK(split_ok(input) == words{"a\x01\xff", "b"});
}
