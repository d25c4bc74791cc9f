#pragma once

// A small HTTP/1.1 server on its own thread (one poll loop, no thread per
// client) for the node's /metrics and dashboard. One request per
// connection (`Connection: close`): a scraper or a page's fetch costs one
// round trip more and nothing can pipeline into a half-read request. The
// limits below bound what a hostile or stalled client can hold.

#include "http_request.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace tasksup::app {

/// Settings of the HTTP server, with their defaults.
struct http_server_options {
  std::string host = "127.0.0.1";
  /// 0 picks a free port.
  std::uint16_t port = 0;
  http_limits limits;
  /// Open connections at most; one more is answered 503 and closed.
  std::size_t max_connections = 64;
  /// A request not complete this long after the connection opened is
  /// answered 408 and closed (slow clients cannot hold a connection).
  std::chrono::milliseconds request_timeout{10000};
  /// A response not fully sent in this time is abandoned.
  std::chrono::milliseconds write_timeout{30000};
};

/// Counters of what the server saw, for tests and the log.
struct http_server_stats {
  std::size_t requests = 0;
  std::size_t rejected = 0;
  std::size_t timed_out = 0;
};

/// Serves HTTP with `handler` called on the server's thread, one request at
/// a time. A handler that throws gives a 500.
class http_server {
public:
  using handler_fn = std::function<http_response(const http_request&)>;

  /// Binds and starts the server; on failure returns null and sets `err`.
  static std::unique_ptr<http_server>
  start(const http_server_options& opts, handler_fn handler, std::string& err);

  /// Stops the thread and closes every connection.
  ~http_server();

  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The port it listens on.
  std::uint16_t port() const noexcept { return port_; }

  /// A snapshot of the counters.
  http_server_stats stats() const;

  struct impl;

private:
  http_server() = default;

  std::unique_ptr<impl> impl_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

} // namespace tasksup::app
