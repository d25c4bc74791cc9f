#include "tasksup/supervisor/json_writer.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace tasksup;

TEST_CASE("json_writer: strings escaped byte for byte as Boost.JSON does") {
  std::string every_byte;
  for (int c = 0; c < 128; ++c)
    every_byte += static_cast<char>(c);
  every_byte += "é € 😀";
  json_writer w;
  w.raw_string(every_byte);
  CHECK(w.take() == boost::json::serialize(boost::json::string{every_byte}));
}

TEST_CASE("json_writer: untrusted strings have invalid UTF-8 replaced") {
  json_writer w;
  w.begin_array();
  w.string("ok\xff\n");
  w.raw_string("id");
  w.end_array();
  CHECK(w.take() == "[\"ok\xEF\xBF\xBD\\n\",\"id\"]");
}

TEST_CASE("json_writer: keys, separators, raw text and writing on") {
  json_writer w{"prefix "};
  w.begin_object();
  w.key("n");
  w.integer(-3);
  w.any_key("a\"b");
  w.unsigned_integer(std::numeric_limits<std::uint64_t>::max());
  w.key("event");
  w.raw(R"({"x":1})");
  w.key("list");
  w.begin_array();
  w.boolean(true);
  w.null();
  w.begin_object();
  w.end_object();
  w.end_array();
  w.end_object();
  CHECK(w.release() == R"(prefix {"n":-3,"a\"b":18446744073709551615,)"
                       R"("event":{"x":1},"list":[true,null,{}]})");
}

TEST_CASE("json_writer: numbers in plain notation, null when not finite") {
  auto text = [](double x) {
    std::string out;
    append_json_number(out, x);
    return out;
  };
  CHECK(text(30) == "30.0");
  CHECK(text(1795362464.5893607) == "1795362464.5893607");
  CHECK(text(1e-7) == "0.0000001");
  CHECK(text(std::nan("")) == "null");
  CHECK(text(std::numeric_limits<double>::infinity()) == "null");
  auto big = text(std::numeric_limits<double>::max());
  CHECK(big.size() <= max_json_number_chars);
  CHECK(big.rfind("17976931348623157", 0) == 0);
  CHECK(big.find_first_of("eE") == std::string::npos);
}

TEST_CASE("json_writer: a Boost.JSON value as the serializer writes it, "
          "but for doubles") {
  auto text =
    R"({"k\n":[1,-2,18446744073709551615,"s\u0001",true,null,{}],"d":2.5})";
  auto v = boost::json::parse(text);
  CHECK(boost::json::serialize(v).find("2.5E0") != std::string::npos);
  json_writer w;
  w.value(v);
  CHECK(w.take() == text);
}
