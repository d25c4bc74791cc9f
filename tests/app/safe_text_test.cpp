#include "safe_text.hpp"

#include <catch2/catch.hpp>

#include <string>

using tasksup::app::printable;
using tasksup::app::utf8_or_escaped;

TEST_CASE("utf8_or_escaped keeps valid UTF-8") {
  CHECK(utf8_or_escaped("plain ascii") == "plain ascii");
  CHECK(utf8_or_escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(utf8_or_escaped(std::string("a\0b\x1b", 4)) ==
        std::string("a\0b\x1b", 4));
}

TEST_CASE("utf8_or_escaped escapes every byte of an invalid sequence") {
  CHECK(utf8_or_escaped("\xff") == "\\xff");
  CHECK(utf8_or_escaped("a\xc3") == "a\\xc3");                 // truncated
  CHECK(utf8_or_escaped("\xc0\xaf") == "\\xc0\\xaf");          // overlong
  CHECK(utf8_or_escaped("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // surrogate
  CHECK(utf8_or_escaped("\xf4\x90\x80\x80") ==
        "\\xf4\\x90\\x80\\x80"); // above U+10FFFF
  CHECK(utf8_or_escaped("\xe2\x82x") == "\\xe2\\x82x");
}

TEST_CASE("printable escapes control characters too") {
  CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(printable("tab\tstays") == "tab\tstays");
  CHECK(printable("cr\rnl\n") == "cr\\x0dnl\\x0a");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("c1 \xc2\x9b") == "c1 \\xc2\\x9b");
  CHECK(printable("nbsp \xc2\xa0 ok") == "nbsp \xc2\xa0 ok");
  CHECK(printable("bad \xff") == "bad \\xff");
}
