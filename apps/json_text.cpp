#include "json_text.hpp"

#include "tasksup/actors/events.hpp"

#include <charconv>

namespace tasksup::app {

namespace {

template<class Integer>
void append_integer(std::string& out, Integer x) {
  char buf[24];
  out.append(buf, static_cast<std::size_t>(
                    std::to_chars(buf, buf + sizeof(buf), x).ptr - buf));
}

} // namespace

void append_json_text(std::string& out, const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::double_:
      append_json_number(out, v.get_double());
      return;
    case boost::json::kind::object: {
      out += '{';
      bool first = true;
      for (auto& kv : v.get_object()) {
        if (!first)
          out += ',';
        first = false;
        append_json_string(out, kv.key());
        out += ':';
        append_json_text(out, kv.value());
      }
      out += '}';
      return;
    }
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (auto& x : v.get_array()) {
        if (!first)
          out += ',';
        first = false;
        append_json_text(out, x);
      }
      out += ']';
      return;
    }
    case boost::json::kind::string:
      append_json_string(out, v.get_string());
      return;
    case boost::json::kind::int64:
      append_integer(out, v.get_int64());
      return;
    case boost::json::kind::uint64:
      append_integer(out, v.get_uint64());
      return;
    case boost::json::kind::bool_:
      out += v.get_bool() ? "true" : "false";
      return;
    case boost::json::kind::null:
      out += "null";
      return;
  }
}

std::string json_text(const boost::json::value& v) {
  std::string out;
  append_json_text(out, v);
  return out;
}

std::optional<double> json_number_at(const boost::json::object& o,
                                     std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_number())
    return std::nullopt;
  return v->to_number<double>();
}

} // namespace tasksup::app
