#include "json_text.hpp"

#include "tasksup/supervisor/json_writer.hpp"

#include <utility>

namespace tasksup::app {

std::string json_text(const boost::json::value& v) {
  json_writer w;
  w.value(v);
  return w.take();
}

void append_json_text(std::string& out, const boost::json::value& v) {
  // A writer of its own, appended: one started on `out` grows by doubling
  // everything written so far, which, row after row of a long listing,
  // zero-filled the whole output once per row.
  out += json_text(v);
}

std::optional<double> json_number_at(const boost::json::object& o,
                                     std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_number())
    return std::nullopt;
  return v->to_number<double>();
}

std::string json_text_at(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string{v->get_string()} : std::string{};
}

} // namespace tasksup::app
