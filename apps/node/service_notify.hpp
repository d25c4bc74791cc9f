#pragma once

// systemd's readiness protocol (sd_notify(3)), spoken directly: a unit of
// Type=notify learns that the node is ready, what it is doing and that it is
// stopping from datagrams on the socket named by $NOTIFY_SOCKET. No
// libsystemd: the protocol is one sendto().

#include <string>

namespace tasksup::app {

/// Sends `state` (newline-separated assignments such as "READY=1" and
/// "STATUS=...") to the service manager named by $NOTIFY_SOCKET: a path, or
/// an abstract socket name written with a leading '@'. Returns whether it
/// was sent; false, and nothing done, when $NOTIFY_SOCKET is unset (not
/// started by systemd).
bool notify_service_manager(const std::string& state);

} // namespace tasksup::app
