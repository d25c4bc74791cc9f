#pragma once

#include <boost/json/value.hpp>

#include <string>

namespace tasksup::app {

/// `v` serialized as Boost.JSON does, except doubles, which never take
/// exponent form (`1795362464.58936`, not `1.79536246458936E9`): what the
/// commands print for scripts to read.
std::string json_text(const boost::json::value& v);

} // namespace tasksup::app
