#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tasksup::app {

/// `v` serialized as Boost.JSON does, except doubles, which never take
/// exponent form (`1795362464.58936`, not `1.79536246458936E9`): what the
/// commands print for scripts to read, written by `json_writer::value`.
std::string json_text(const boost::json::value& v);

/// Appends `json_text(v)` to `out`.
void append_json_text(std::string& out, const boost::json::value& v);

/// The number at `key` in `o` (a time in seconds, say); nullopt when it is
/// absent, null or not a number.
std::optional<double> json_number_at(const boost::json::object& o,
                                     std::string_view key);

/// The string at `key` in `o`; empty when it is absent or not a string.
std::string json_text_at(const boost::json::object& o, std::string_view key);

} // namespace tasksup::app
