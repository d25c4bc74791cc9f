#include "json_text.hpp"

#include "tasksup/actors/events.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

namespace tasksup::app {

namespace {

void write(std::string& out, const boost::json::value& v) {
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
        out += boost::json::serialize(boost::json::string{kv.key()});
        out += ':';
        write(out, kv.value());
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
        write(out, x);
      }
      out += ']';
      return;
    }
    case boost::json::kind::null:
    case boost::json::kind::bool_:
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::string:
      out += boost::json::serialize(v);
      return;
  }
}

} // namespace

std::string json_text(const boost::json::value& v) {
  std::string out;
  write(out, v);
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
