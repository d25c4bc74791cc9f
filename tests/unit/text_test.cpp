#include "tasksup/supervisor/text.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

using namespace tasksup;
using namespace std::string_literals;

TEST_CASE("valid_utf8 accepts RFC 3629 text and nothing else") {
  // Valid: ASCII, each sequence length at its edges, the highest code point.
  for (auto s :
       {""s, "plain ascii\n"s, "\0"s, "\xC2\x80"s, "\xDF\xBF"s, "\xE0\xA0\x80"s,
        "\xED\x9F\xBF"s, "\xEF\xBF\xBF"s, "\xF0\x90\x80\x80"s,
        "\xF4\x8F\xBF\xBF"s, "gr\xC3\xBC\xC3\x9F"s}) {
    CAPTURE(s);
    CHECK(valid_utf8(s));
    CHECK(first_invalid_utf8(s) == std::string_view::npos);
  }
  // Invalid: stray continuation, overlong forms, surrogates, above
  // U+10FFFF, bytes that never lead, truncated sequences.
  for (auto s :
       {"\x80"s, "\xC0\xAF"s, "\xC1\xBF"s, "\xE0\x9F\xBF"s, "\xED\xA0\x80"s,
        "\xF0\x8F\xBF\xBF"s, "\xF4\x90\x80\x80"s, "\xF5\x80\x80\x80"s, "\xFF"s,
        "\xC3"s, "\xE2\x82"s, "\xF0\x9F\x98"s}) {
    CAPTURE(s);
    CHECK_FALSE(valid_utf8(s));
    CHECK(first_invalid_utf8(s) == 0);
  }
}

TEST_CASE("first_invalid_utf8 names the offset of the first bad byte") {
  CHECK(first_invalid_utf8("ok \xC3\xBC then \xC3 bad") == 11);
  CHECK(first_invalid_utf8("abc\xE2\x82") == 3);
}

TEST_CASE("first_invalid_utf8 finds a bad byte at every offset of an ASCII "
          "run, and a good sequence anywhere is accepted") {
  // ASCII is skipped eight bytes at a time: every offset and length around
  // those words, with a bad byte, a truncated sequence and a good one.
  for (std::size_t n = 1; n <= 26; ++n) {
    for (std::size_t p = 0; p < n; ++p) {
      CAPTURE(n, p);
      std::string s(n, 'a');
      s[p] = '\xFF';
      CHECK(first_invalid_utf8(s) == p);
      s[p] = '\xC3'; // a lead byte without its continuation (or 'a' after)
      CHECK(first_invalid_utf8(s) == p);
      s.insert(p + 1, 1, '\xBC');
      CHECK(first_invalid_utf8(s) == std::string_view::npos);
      CHECK(valid_utf8(s));
    }
  }
}

TEST_CASE("scan_utf8 reports the maximal valid subpart of a bad sequence") {
  auto r = scan_utf8("\xE2\x82x", 0);
  CHECK(r.len == 3);
  CHECK(r.valid == 2);
  r = scan_utf8("\xF0\x9F\x98\x80", 0);
  CHECK(r.len == 4);
  CHECK(r.valid == 4);
  r = scan_utf8("\xC0\x80", 0);
  CHECK(r.len == 0);
  CHECK(utf8_sequence_length("a", 0) == 1);
  CHECK(utf8_sequence_length("\xC3\xBC", 0) == 2);
  CHECK(utf8_sequence_length("\xC3", 0) == 0);
}
