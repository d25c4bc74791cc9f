#pragma once

// The node's local control socket, as both ends see it.
//
// A node started by `tasksup serve` also listens on a Unix socket in its
// state directory, `<state dir>/control-<port>.sock` (the port of its front
// door), and serves there only its own user (checked with SO_PEERCRED on
// every connection; the socket file is 0600). `tasksup status` and
// `tasksup submit` on the same machine use it when the user named no
// credentials (`--certs`, `--insecure`, $TASKSUP_CERTS): such a command
// needs neither an actor system nor a TLS handshake, which are most of its
// start-up (issue 17). Everything else goes through the node's TCP port.
//
// The protocol is HTTP/1.1, one request per connection, JSON answers:
//   GET  /v1/status {"now":N,"tasks":[{"record":{..},"last_decision":".."}]}
//   GET  /v1/status/ID       the same with one task, or 404
//   POST /v1/submit          {"replace":B,"tasks":["task JSON", ...]} ->
//                            [{"id":".."} | {"rejected":"why"} |
//                             {"failed":"why","timeout":B}, ...]
//   POST /v1/tasks/ID/ACTION {"took_effect":B}; ACTION is stop, kill,
//                            retry-now, fallback-now, forget, pause or
//                            resume
// An error answer is {"error":"why","refused":B,"timeout":B}: `refused`
// when the node refused the request (an unknown task), `timeout` when the
// node did not answer in time. Nothing here needs CAF.

#include "node_address.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <sys/types.h>

namespace tasksup::app {

/// The user of the process at the other end of the Unix socket `fd`
/// (SO_PEERCRED, as the kernel recorded it at connect or listen), or
/// nullopt when it cannot be read. Both ends of the control socket check
/// it: the node its clients, a client the node.
std::optional<uid_t> socket_peer_uid(int fd);

/// The control socket of the node whose front door is on `port` and whose
/// state directory is `state_dir`.
std::string control_socket_path(const std::string& state_dir,
                                std::uint16_t port);

/// The tasks one `POST /v1/submit` carries at most, and the bytes of task
/// text (one larger task goes alone).
inline constexpr std::size_t local_submit_batch = 64;
inline constexpr std::size_t local_submit_batch_bytes = 4u << 20;

/// An answer from the control socket.
struct local_answer {
  int status = 0;
  std::string body;
};

/// Why a connection or an exchange failed. A connection that failed sent
/// nothing: no usable socket there (none, not this user's, or nobody
/// listening), and the command should use the node's TCP port.
struct local_failure {
  /// The node did not answer within the time allowed.
  bool timeout = false;
  std::string text;
};

/// One connection to a node's control socket, for one request.
class local_connection {
public:
  /// Connects to the socket at `path`, only to a socket file owned by this
  /// user and served by a process of this user (in a directory others could
  /// write to, a planted socket must not get our tasks); nullopt, with why
  /// in `failure`, when there is none.
  static std::optional<local_connection> open(const std::string& path,
                                              local_failure& failure);

  local_connection(local_connection&& other) noexcept;
  local_connection& operator=(local_connection&& other) noexcept;
  ~local_connection();

  /// Sends `method target` with `body` and reads the answer, waiting at
  /// most `timeout` for each part of it. Once per connection.
  std::optional<local_answer> exchange(const std::string& method,
                                       const std::string& target,
                                       const std::string& body,
                                       std::chrono::milliseconds timeout,
                                       local_failure& failure);

private:
  explicit local_connection(int fd) : fd_(fd) {}

  int fd_ = -1;
};

/// The message a control command prints for a request the node failed or
/// refused (`tasksup CMD: ...`), on whichever path it went; returns the
/// exit status (`refusal_status` for a refusal, else unavailable).
int report_node_failure(const std::string& command, const std::string& address,
                        bool refused, bool timeout, const std::string& text,
                        int refusal_status);

/// How long a control command waits for any one answer from the node.
/// Requests to a node that died only end in their timeout.
inline constexpr std::chrono::seconds node_request_timeout{10};

} // namespace tasksup::app
