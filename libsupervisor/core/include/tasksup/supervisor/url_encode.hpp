#pragma once

// Percent-encoding for the URLs tasksup builds: the Docker Engine API's
// paths and queries, and the node's control socket's.

#include <string>
#include <string_view>

namespace tasksup {

/// `text` as one URL path segment or query value: every byte outside the
/// unreserved set (A-Z a-z 0-9 - _ . ~) as %XX.
std::string url_encode(std::string_view text);

} // namespace tasksup
