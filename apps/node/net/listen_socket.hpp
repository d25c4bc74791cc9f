#pragma once

// The one way the node opens a listening TCP socket (the front door's
// connection guard and the HTTP server).

#include <cstdint>
#include <string>

namespace tasksup::app {

/// A non-blocking, close-on-exec socket listening on `host`:`port` (port 0
/// picks a free one), or -1 with the reason in `err`.
int open_listener(const std::string& host, std::uint16_t port,
                  std::string& err);

/// A non-blocking, close-on-exec socket listening on the Unix socket
/// `path`, its file made 0600, or -1 with the reason in `err`. A socket
/// file nobody listens on any more (its process died) is replaced; one
/// another process still serves is an error.
int open_unix_listener(const std::string& path, std::string& err);

/// The port `fd` is bound to (0 when it cannot be read).
std::uint16_t bound_port(int fd);

} // namespace tasksup::app
