#pragma once

// A small HTTP/1.1 server on its own thread (one poll loop, no thread per
// client) for the node's /metrics and dashboard. One request per
// connection (`Connection: close`): a scraper or a page's fetch costs one
// round trip more and nothing can pipeline into a half-read request.
//
// The handler never blocks the loop: it gets an `http_reply` and answers
// through it whenever it can, from any thread, while the loop goes on
// reading, answering and timing out the other connections. A reply can
// also be a stream (server-sent events) that stays open until either side
// ends it. The limits below bound what a hostile or stalled client can
// hold.

#include "http_request.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <sys/types.h>

namespace tasksup::app {

/// Settings of the HTTP server, with their defaults.
struct http_server_options {
  std::string host = "127.0.0.1";
  /// 0 picks a free port.
  std::uint16_t port = 0;
  /// When set, listen on this Unix socket instead of host:port (made 0600,
  /// removed again when the server stops; a stale one left by a process
  /// that died is replaced, a live one is an error).
  std::string unix_path;
  /// When set, only connections whose peer runs as this user (SO_PEERCRED;
  /// Unix sockets only) are served; others are answered 403 and closed.
  std::optional<uid_t> peer_uid;
  http_limits limits;
  /// Open connections at most. When a new one comes in at the limit, the
  /// one idle longest (a request not yet complete, or a finished response
  /// being drained) is closed for it, else the oldest stream; when every
  /// connection waits for its answer, the new one gets 503.
  std::size_t max_connections = 64;
  /// A request not complete this long after the connection opened is
  /// answered 408 and closed (slow clients cannot hold a connection).
  std::chrono::milliseconds request_timeout{10000};
  /// A handler that has not answered in this time is answered 503 for it.
  std::chrono::milliseconds answer_timeout{30000};
  /// A response not fully sent in this time is abandoned.
  std::chrono::milliseconds write_timeout{30000};
  /// A stream whose client has not read this many bytes sent to it is
  /// dropped (a slow reader is never buffered without limit).
  std::size_t max_stream_backlog = 256 * 1024;
};

/// Counters of what the server saw, for tests and the log.
struct http_server_stats {
  std::size_t requests = 0;
  std::size_t rejected = 0;
  std::size_t timed_out = 0;
  /// Idle connections closed to admit a new one.
  std::size_t evicted = 0;
  /// Streams dropped because their client fell behind.
  std::size_t streams_dropped = 0;
  /// Connections open now, and how many of them are streams.
  std::size_t connections = 0;
  std::size_t streams = 0;
};

namespace detail {
struct http_reply_slot;
} // namespace detail

/// The way to answer one request, once, from any thread. Copies share the
/// same request. A reply that is never used is answered 503 by the server
/// after `answer_timeout`.
class http_reply {
public:
  http_reply() = default;
  explicit http_reply(std::shared_ptr<detail::http_reply_slot> slot)
    : slot_(std::move(slot)) {}

  /// Sends `r` and closes the connection; ignored after the first answer.
  void send(http_response r) const;

  /// Starts a stream: sends the status line, the headers and `head.body`
  /// (`head.stream` is set for it) and keeps the connection open.
  void open_stream(http_response head) const;

  /// Appends `bytes` to an open stream. False once the connection is gone
  /// (the client closed it, fell behind, or the server stopped): the
  /// producer should stop.
  bool push(std::string bytes) const;

  /// Ends an open stream (closes the connection once what was pushed is
  /// sent).
  void close() const;

  /// False once the connection is gone.
  bool open() const;

private:
  std::shared_ptr<detail::http_reply_slot> slot_;
};

/// Serves HTTP with `handler` called on the server's thread for each
/// complete request; the handler must not block (it answers through the
/// reply, now or later). A handler that throws gives a 500.
class http_server {
public:
  using handler_fn = std::function<void(const http_request&, http_reply)>;

  /// Binds and starts the server; on failure returns null and sets `err`.
  static std::unique_ptr<http_server>
  start(const http_server_options& opts, handler_fn handler, std::string& err);

  /// Stops the thread and closes every connection (open replies report
  /// themselves closed).
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

  std::shared_ptr<impl> impl_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

} // namespace tasksup::app
