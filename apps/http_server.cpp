#include "http_server.hpp"
#include "listen_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <vector>

namespace tasksup::app {

using clock_type = std::chrono::steady_clock;

namespace {

struct connection {
  int fd = -1;
  clock_type::time_point opened;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  /// A response is queued: read nothing more, close once it is sent.
  bool responding = false;
  clock_type::time_point responding_since;
  /// Sent and shut down for writing: what the client still sends is read
  /// and dropped until it closes (a close with unread input would reset
  /// the connection and could destroy the response before it is read).
  bool draining = false;
  clock_type::time_point draining_since;
  std::size_t drained = 0;
};

/// How long and how much a finished connection is drained at most.
constexpr std::chrono::milliseconds linger_time{2000};
constexpr std::size_t linger_bytes = 1 << 20;

} // namespace

struct http_server::impl {
  http_server_options opts;
  handler_fn handler;
  int listener = -1;
  int wake = -1;
  std::atomic<bool> stop{false};
  std::list<connection> conns;
  mutable std::mutex stats_mutex;
  http_server_stats stats;

  ~impl() {
    for (auto& c : conns)
      ::close(c.fd);
    if (listener >= 0)
      ::close(listener);
    if (wake >= 0)
      ::close(wake);
  }

  void count(std::size_t http_server_stats::*field) {
    std::lock_guard<std::mutex> guard{stats_mutex};
    ++(stats.*field);
  }

  void respond(connection& c, const http_response& r, bool head_only) {
    c.out = serialize_response(r, head_only);
    c.sent = 0;
    c.responding = true;
    c.responding_since = clock_type::now();
    c.in.clear();
    c.in.shrink_to_fit();
  }

  void accept_all() {
    for (;;) {
      int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0)
        return; // EAGAIN, or a transient error: poll again
      if (conns.size() >= opts.max_connections) {
        // Best effort: the socket is fresh, its send buffer empty.
        auto text = serialize_response(
          text_response(503, "too many connections; try again"), false);
        [[maybe_unused]] auto n =
          ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
        ::close(fd);
        count(&http_server_stats::rejected);
        continue;
      }
      connection c;
      c.fd = fd;
      c.opened = clock_type::now();
      conns.push_back(std::move(c));
    }
  }

  /// Reads what is there; returns false when the connection is done.
  bool on_readable(connection& c) {
    char buf[4096];
    for (;;) {
      auto n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        // Never hold more than one request's worth.
        auto cap = opts.limits.max_request_line + opts.limits.max_header_bytes +
                   opts.limits.max_body + 8;
        if (c.in.size() > cap)
          break;
        continue;
      }
      if (n == 0)
        return false; // the peer closed before a full request
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      return false;
    }
    http_request req;
    auto r = parse_http_request(c.in, opts.limits, req);
    if (r.status == http_parse_status::incomplete)
      return true;
    if (r.status == http_parse_status::error) {
      count(&http_server_stats::rejected);
      respond(c, text_response(r.error_code, r.reason), false);
      return true;
    }
    count(&http_server_stats::requests);
    http_response resp;
    try {
      resp = handler(req);
    } catch (const std::exception& e) {
      resp = text_response(500, std::string{"internal error: "} + e.what());
    } catch (...) {
      resp = text_response(500, "internal error");
    }
    respond(c, resp, req.method == "HEAD");
    return true;
  }

  /// Sends what it can; returns false when the connection is done.
  bool on_writable(connection& c) {
    while (c.sent < c.out.size()) {
      auto n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                      MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true;
      return false;
    }
    // All sent: close our side; the client reads to the end.
    ::shutdown(c.fd, SHUT_WR);
    c.draining = true;
    c.draining_since = clock_type::now();
    c.out.clear();
    c.out.shrink_to_fit();
    return true;
  }

  /// Drops input after the response; returns false once the client closed.
  bool on_drain(connection& c) {
    char buf[4096];
    for (;;) {
      auto n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.drained += static_cast<std::size_t>(n);
        if (c.drained > linger_bytes)
          return false;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::list<connection>::iterator> owners;
    while (!stop.load()) {
      fds.clear();
      owners.clear();
      fds.push_back({wake, POLLIN, 0});
      fds.push_back({listener, POLLIN, 0});
      for (auto i = conns.begin(); i != conns.end(); ++i) {
        short want = i->draining ? POLLIN : i->responding ? POLLOUT : POLLIN;
        fds.push_back({i->fd, want, 0});
        owners.push_back(i);
      }
      // Wake at least every 250 ms to enforce the timeouts.
      int rc = ::poll(fds.data(), fds.size(), 250);
      if (rc < 0 && errno != EINTR)
        return;
      if (fds[0].revents != 0) {
        std::uint64_t x = 0;
        [[maybe_unused]] auto n = ::read(wake, &x, sizeof x);
      }
      if (stop.load())
        return;
      if (fds[1].revents & POLLIN)
        accept_all();
      auto now = clock_type::now();
      for (std::size_t k = 0; k < owners.size(); ++k) {
        auto it = owners[k];
        auto& c = *it;
        auto rev = fds[k + 2].revents;
        bool keep = true;
        if (rev & (POLLERR | POLLNVAL)) {
          keep = false;
        } else if (c.draining) {
          if (rev & (POLLIN | POLLHUP))
            keep = on_drain(c);
          if (keep && now - c.draining_since > linger_time)
            keep = false;
        } else if (c.responding) {
          if (rev & (POLLOUT | POLLHUP))
            keep = on_writable(c);
          if (keep && now - c.responding_since > opts.write_timeout)
            keep = false;
        } else {
          if (rev & (POLLIN | POLLHUP))
            keep = on_readable(c);
          if (keep && !c.responding && now - c.opened > opts.request_timeout) {
            count(&http_server_stats::timed_out);
            respond(c, text_response(408, "the request took too long"), false);
          }
        }
        if (!keep) {
          ::close(c.fd);
          conns.erase(it);
        }
      }
    }
  }
};

std::unique_ptr<http_server> http_server::start(const http_server_options& opts,
                                                handler_fn handler,
                                                std::string& err) {
  auto st = std::make_unique<impl>();
  st->opts = opts;
  st->handler = std::move(handler);
  st->listener = open_listener(opts.host, opts.port, err);
  if (st->listener < 0)
    return nullptr;
  auto port = bound_port(st->listener);
  st->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->wake < 0) {
    err = std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<http_server> server{new http_server};
  server->port_ = port;
  server->impl_ = std::move(st);
  server->thread_ = std::thread{[p = server->impl_.get()] { p->run(); }};
  return server;
}

http_server::~http_server() {
  if (impl_) {
    impl_->stop.store(true);
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(impl_->wake, &one, sizeof one);
  }
  if (thread_.joinable())
    thread_.join();
}

http_server_stats http_server::stats() const {
  std::lock_guard<std::mutex> guard{impl_->stats_mutex};
  return impl_->stats;
}

} // namespace tasksup::app
