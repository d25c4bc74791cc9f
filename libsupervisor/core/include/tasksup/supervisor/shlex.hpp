#pragma once

#include "tasksup/supervisor/expected.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// Splits `str` into words like a POSIX shell, without running one: single
/// quotes keep everything literal, double quotes honour `\"`, `\\`, `\$` and
/// `` \` ``, a backslash outside quotes escapes the next character, unquoted
/// whitespace separates words. No expansion of any kind. An unbalanced quote
/// or a trailing backslash is an error (with an empty `where`/`path` for the
/// caller to fill in).
expected<std::vector<std::string>> shlex_split(std::string_view str);

} // namespace tasksup
