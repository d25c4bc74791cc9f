#include "json_text.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>

using namespace tasksup::app;

namespace {

/// A random JSON value without doubles (whose text differs on purpose):
/// strings of any ASCII byte and some multi-byte UTF-8, keys alike, nested
/// up to `depth`.
boost::json::value random_value(std::mt19937& rng, int depth) {
  auto pick = [&](int n) {
    return static_cast<int>(rng() % static_cast<unsigned>(n));
  };
  auto text = [&] {
    static const char* pieces[] = {"é", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                   "\\", "\""};
    std::string s;
    for (int i = pick(12); i > 0; --i) {
      if (pick(4) == 0)
        s += pieces[pick(5)];
      else
        s += static_cast<char>(pick(128));
    }
    return s;
  };
  switch (depth > 0 ? pick(8) : pick(6)) {
    case 0:
      return nullptr;
    case 1:
      return pick(2) == 1;
    case 2:
      return static_cast<std::int64_t>(rng()) -
             static_cast<std::int64_t>(rng()) * 4096;
    case 3:
      return static_cast<std::uint64_t>(rng()) << 33;
    case 4:
    case 5:
      return boost::json::string{text()};
    case 6: {
      boost::json::array a;
      for (int i = pick(5); i > 0; --i)
        a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      boost::json::object o;
      for (int i = pick(5); i > 0; --i)
        o[text()] = random_value(rng, depth - 1);
      return o;
    }
  }
}

} // namespace

TEST_CASE("json_text: the text Boost.JSON writes, for every kind but doubles") {
  std::string every_ascii;
  for (int c = 0; c < 128; ++c)
    every_ascii += static_cast<char>(c);
  boost::json::value fixed = boost::json::object{
    {"every ASCII byte", every_ascii},
    {every_ascii, "as a key"},
    {"utf-8", "é € 😀"},
    {"empty", boost::json::object{}},
    {"list", boost::json::array{nullptr, true, false, boost::json::array{}}},
    {"int64", boost::json::array{std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max(), 0}},
    {"uint64", std::numeric_limits<std::uint64_t>::max()}};
  CHECK(json_text(fixed) == boost::json::serialize(fixed));
  std::mt19937 rng{20261127};
  for (int i = 0; i < 2000; ++i) {
    auto v = random_value(rng, 3);
    INFO("value " << i << ": " << boost::json::serialize(v));
    REQUIRE(json_text(v) == boost::json::serialize(v));
  }
}

TEST_CASE("json_text: doubles in plain notation, as numbers that read back") {
  boost::json::value v =
    boost::json::object{{"ts", 1795362464.5893607}, {"whole", 30.0}};
  CHECK(json_text(v) == R"({"ts":1795362464.5893607,"whole":30.0})");
  auto back = boost::json::parse(json_text(v));
  CHECK(back.at("ts").as_double() == 1795362464.5893607);
}

TEST_CASE("json_text: appending adds to what is there") {
  std::string out = "prefix ";
  append_json_text(out, boost::json::array{1, "a\nb"});
  CHECK(out == R"(prefix [1,"a\nb"])");
}
