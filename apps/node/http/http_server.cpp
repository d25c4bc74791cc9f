#include "http_server.hpp"
#include "listen_socket.hpp"
#include "local_control.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

namespace tasksup::app {

using clock_type = std::chrono::steady_clock;

namespace detail {

/// What a reply asks of the server's thread.
struct http_command {
  enum kind_t { send, open, push, close };
  std::uint64_t id = 0;
  kind_t kind = send;
  std::string bytes;
};

/// Where replies post their commands; outlives the server while a reply
/// holds it, so a late reply never touches a closed descriptor.
struct http_mailbox {
  std::mutex mutex;
  std::vector<http_command> queue;
  int wake = -1;

  ~http_mailbox() {
    if (wake >= 0)
      ::close(wake);
  }

  void post(http_command cmd) {
    {
      std::lock_guard<std::mutex> guard{mutex};
      queue.push_back(std::move(cmd));
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake, &one, sizeof one);
  }
};

struct http_reply_slot {
  std::weak_ptr<http_mailbox> box;
  std::uint64_t id = 0;
  bool head_only = false;
  std::atomic<bool> alive{true};
  std::atomic<bool> answered{false};
};

} // namespace detail

void http_reply::send(http_response r) const {
  if (!slot_ || slot_->answered.exchange(true))
    return;
  if (auto box = slot_->box.lock())
    box->post({slot_->id, detail::http_command::send,
               serialize_response(r, slot_->head_only)});
}

void http_reply::open_stream(http_response head) const {
  if (!slot_ || slot_->answered.exchange(true))
    return;
  head.stream = true;
  if (auto box = slot_->box.lock())
    box->post({slot_->id, detail::http_command::open,
               serialize_response(head, slot_->head_only)});
}

bool http_reply::push(std::string bytes) const {
  if (!open())
    return false;
  auto box = slot_->box.lock();
  if (!box)
    return false;
  box->post({slot_->id, detail::http_command::push, std::move(bytes)});
  return true;
}

void http_reply::close() const {
  if (!open())
    return;
  if (auto box = slot_->box.lock())
    box->post({slot_->id, detail::http_command::close, {}});
}

bool http_reply::open() const {
  return slot_ && slot_->alive.load() && !slot_->box.expired();
}

namespace {

enum class conn_state {
  /// Reading the request.
  reading,
  /// The handler has it; nothing is read or written until it answers.
  waiting,
  /// Sending a whole response, then draining.
  responding,
  /// Sending a stream for as long as both sides keep it.
  streaming,
  /// Sent and shut down for writing: what the client still sends is read
  /// and dropped until it closes (a close with unread input would reset
  /// the connection and could destroy the response before it is read).
  draining,
};

struct connection {
  int fd = -1;
  conn_state state = conn_state::reading;
  clock_type::time_point opened;
  /// When the current state began (or a stream last made progress).
  clock_type::time_point since;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  std::size_t drained = 0;
  /// The stream's producer ended it: close once `out` is sent.
  bool close_when_sent = false;
  std::shared_ptr<detail::http_reply_slot> slot;
};

/// How long and how much a finished connection is drained at most.
constexpr std::chrono::milliseconds linger_time{2000};
constexpr std::size_t linger_bytes = 1 << 20;

} // namespace

struct http_server::impl {
  http_server_options opts;
  handler_fn handler;
  std::uint16_t port = 0;
  int listener = -1;
  /// The Unix socket file made for `listener` (to remove only our own).
  dev_t socket_dev = 0;
  ino_t socket_ino = 0;
  std::shared_ptr<detail::http_mailbox> box;
  std::atomic<bool> stop{false};
  /// By id, which is the order they opened in: the oldest first.
  std::map<std::uint64_t, connection> conns;
  std::uint64_t next_id = 1;
  mutable std::mutex stats_mutex;
  http_server_stats stats;

  ~impl() {
    for (auto& [id, c] : conns) {
      if (c.slot)
        c.slot->alive = false;
      ::close(c.fd);
    }
    if (listener >= 0)
      ::close(listener);
    struct stat st {};
    if (!opts.unix_path.empty() && ::lstat(opts.unix_path.c_str(), &st) == 0 &&
        st.st_dev == socket_dev && st.st_ino == socket_ino)
      ::unlink(opts.unix_path.c_str());
  }

  void count(std::size_t http_server_stats::*field) {
    std::lock_guard<std::mutex> guard{stats_mutex};
    ++(stats.*field);
  }

  void respond(connection& c, std::string bytes) {
    if (c.slot) {
      c.slot->answered = true;
      c.slot->alive = false;
    }
    c.out = std::move(bytes);
    c.sent = 0;
    c.state = conn_state::responding;
    c.since = clock_type::now();
    c.in.clear();
    c.in.shrink_to_fit();
  }

  void respond(connection& c, const http_response& r) {
    respond(c, serialize_response(r, false));
  }

  void drop(std::map<std::uint64_t, connection>::iterator it) {
    if (it->second.slot)
      it->second.slot->alive = false;
    ::close(it->second.fd);
    conns.erase(it);
  }

  /// Frees a place for a new connection: the oldest idle one, else the
  /// oldest stream. False when every connection waits for an answer or is
  /// being answered.
  bool evict_one() {
    for (auto want :
         {conn_state::reading, conn_state::draining, conn_state::streaming}) {
      for (auto it = conns.begin(); it != conns.end(); ++it) {
        if (it->second.state != want)
          continue;
        // Counted before the client can see the answer.
        count(&http_server_stats::evicted);
        if (want == conn_state::reading) {
          // Best effort: nothing was sent on it yet.
          auto text = serialize_response(
            text_response(503, "closed for a newer connection"), false);
          [[maybe_unused]] auto n =
            ::send(it->second.fd, text.data(), text.size(), MSG_NOSIGNAL);
        }
        drop(it);
        return true;
      }
    }
    return false;
  }

  /// Answers a fresh connection `status` with `text`, closes it and counts
  /// it rejected (before the client can see the answer).
  void refuse(int fd, int status, std::string text) {
    count(&http_server_stats::rejected);
    // Best effort: the socket is fresh, its send buffer empty.
    auto bytes =
      serialize_response(text_response(status, std::move(text)), false);
    [[maybe_unused]] auto n =
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::close(fd);
  }

  /// Whether the process at the other end of `fd` runs as `peer_uid`.
  bool peer_allowed(int fd) const {
    auto uid = socket_peer_uid(fd);
    return uid && uid == opts.peer_uid;
  }

  void accept_all() {
    for (;;) {
      int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0)
        return; // EAGAIN, or a transient error: poll again
      if (opts.peer_uid && !peer_allowed(fd)) {
        refuse(fd, 403, "this socket serves only its node's user");
        continue;
      }
      if (conns.size() >= opts.max_connections && !evict_one()) {
        refuse(fd, 503, "too many connections; try again");
        continue;
      }
      connection c;
      c.fd = fd;
      c.opened = c.since = clock_type::now();
      conns.emplace(next_id++, std::move(c));
    }
  }

  /// Reads what is there; returns false when the connection is done.
  bool on_readable(std::uint64_t id, connection& c) {
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
      respond(c, text_response(r.error_code, r.reason));
      return true;
    }
    count(&http_server_stats::requests);
    req.local_port = port;
    c.state = conn_state::waiting;
    c.since = clock_type::now();
    c.in.clear();
    c.in.shrink_to_fit();
    c.slot = std::make_shared<detail::http_reply_slot>();
    c.slot->box = box;
    c.slot->id = id;
    c.slot->head_only = req.method == "HEAD";
    http_reply reply{c.slot};
    try {
      handler(req, reply);
    } catch (const std::exception& e) {
      reply.send(
        text_response(500, std::string{"internal error: "} + e.what()));
    } catch (...) {
      reply.send(text_response(500, "internal error"));
    }
    return true;
  }

  /// Sends what it can; returns false when the connection is done.
  bool on_writable(connection& c) {
    while (c.sent < c.out.size()) {
      auto n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                      MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<std::size_t>(n);
        if (c.state == conn_state::streaming)
          c.since = clock_type::now();
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true;
      return false;
    }
    c.out.clear();
    c.sent = 0;
    if (c.state == conn_state::streaming && !c.close_when_sent)
      return true;
    // All sent: close our side; the client reads to the end.
    if (c.slot)
      c.slot->alive = false;
    ::shutdown(c.fd, SHUT_WR);
    c.state = conn_state::draining;
    c.since = clock_type::now();
    c.out.shrink_to_fit();
    return true;
  }

  /// Drops input after the response (or beside a stream); returns false
  /// once the client closed.
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

  /// Carries out what the replies asked for.
  void run_commands() {
    std::vector<detail::http_command> cmds;
    {
      std::lock_guard<std::mutex> guard{box->mutex};
      cmds.swap(box->queue);
    }
    for (auto& cmd : cmds) {
      auto it = conns.find(cmd.id);
      if (it == conns.end())
        continue; // closed meanwhile
      auto& c = it->second;
      switch (cmd.kind) {
        case detail::http_command::send:
          if (c.state == conn_state::waiting)
            respond(c, std::move(cmd.bytes));
          break;
        case detail::http_command::open:
          if (c.state == conn_state::waiting) {
            c.state = conn_state::streaming;
            c.since = clock_type::now();
            c.out = std::move(cmd.bytes);
            c.sent = 0;
          }
          break;
        case detail::http_command::push:
          if (c.state == conn_state::streaming && !c.close_when_sent) {
            c.out += cmd.bytes;
            if (c.out.size() - c.sent > opts.max_stream_backlog) {
              count(&http_server_stats::streams_dropped);
              drop(it);
            }
          }
          break;
        case detail::http_command::close:
          if (c.state == conn_state::streaming)
            c.close_when_sent = true;
          break;
      }
    }
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> owners;
    while (!stop.load()) {
      fds.clear();
      owners.clear();
      fds.push_back({box->wake, POLLIN, 0});
      fds.push_back({listener, POLLIN, 0});
      for (auto& [id, c] : conns) {
        short want = 0;
        switch (c.state) {
          case conn_state::reading:
          case conn_state::draining:
            want = POLLIN;
            break;
          case conn_state::waiting:
            // Nothing to read or write; errors are reported anyway.
            break;
          case conn_state::responding:
            want = POLLOUT;
            break;
          case conn_state::streaming:
            want = static_cast<short>(
              POLLIN |
              (c.out.size() > c.sent || c.close_when_sent ? POLLOUT : 0));
            break;
        }
        fds.push_back({c.fd, want, 0});
        owners.push_back(id);
      }
      // Wake at least every 250 ms to enforce the timeouts.
      int rc = ::poll(fds.data(), fds.size(), 250);
      if (rc < 0 && errno != EINTR)
        return;
      if (fds[0].revents != 0) {
        std::uint64_t x = 0;
        [[maybe_unused]] auto n = ::read(box->wake, &x, sizeof x);
      }
      if (stop.load())
        return;
      auto now = clock_type::now();
      for (std::size_t k = 0; k < owners.size(); ++k) {
        auto it = conns.find(owners[k]);
        if (it == conns.end())
          continue;
        auto& c = it->second;
        auto rev = fds[k + 2].revents;
        bool keep = true;
        if (rev & (POLLERR | POLLNVAL)) {
          keep = false;
        } else {
          switch (c.state) {
            case conn_state::draining:
              if (rev & (POLLIN | POLLHUP))
                keep = on_drain(c);
              if (keep && now - c.since > linger_time)
                keep = false;
              break;
            case conn_state::responding:
              if (rev & (POLLOUT | POLLHUP))
                keep = on_writable(c);
              if (keep && c.state == conn_state::responding &&
                  now - c.since > opts.write_timeout)
                keep = false;
              break;
            case conn_state::streaming:
              if (rev & (POLLIN | POLLHUP))
                keep = on_drain(c) && !(rev & POLLHUP);
              if (keep && (rev & POLLOUT))
                keep = on_writable(c);
              if (keep && c.state == conn_state::streaming &&
                  c.out.size() > c.sent && now - c.since > opts.write_timeout)
                keep = false;
              break;
            case conn_state::waiting:
              if (rev & POLLHUP)
                keep = false;
              else if (now - c.since > opts.answer_timeout) {
                count(&http_server_stats::timed_out);
                respond(c, text_response(503, "the node did not answer in "
                                              "time"));
              }
              break;
            case conn_state::reading:
              if (rev & (POLLIN | POLLHUP))
                keep = on_readable(it->first, c);
              if (keep && c.state == conn_state::reading &&
                  now - c.opened > opts.request_timeout) {
                count(&http_server_stats::timed_out);
                respond(c, text_response(408, "the request took too long"));
              }
              break;
          }
        }
        if (!keep)
          drop(it);
      }
      // After the connections: a reply for one that just closed is
      // dropped, and a new connection cannot evict one mid-answer.
      run_commands();
      if (fds[1].revents & POLLIN)
        accept_all();
      std::size_t streams = 0;
      for (auto& [id, c] : conns)
        streams += c.state == conn_state::streaming ? 1 : 0;
      std::lock_guard<std::mutex> guard{stats_mutex};
      stats.connections = conns.size();
      stats.streams = streams;
    }
  }
};

std::unique_ptr<http_server> http_server::start(const http_server_options& opts,
                                                handler_fn handler,
                                                std::string& err) {
  auto st = std::make_shared<impl>();
  st->opts = opts;
  st->handler = std::move(handler);
  if (opts.unix_path.empty()) {
    st->listener = open_listener(opts.host, opts.port, err);
    if (st->listener < 0)
      return nullptr;
    st->port = bound_port(st->listener);
  } else {
    st->listener = open_unix_listener(opts.unix_path, err);
    if (st->listener < 0)
      return nullptr;
    struct stat made {};
    if (::lstat(opts.unix_path.c_str(), &made) == 0) {
      st->socket_dev = made.st_dev;
      st->socket_ino = made.st_ino;
    }
  }
  st->box = std::make_shared<detail::http_mailbox>();
  st->box->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->box->wake < 0) {
    err = std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<http_server> server{new http_server};
  server->port_ = st->port;
  server->impl_ = std::move(st);
  server->thread_ = std::thread{[p = server->impl_.get()] { p->run(); }};
  return server;
}

http_server::~http_server() {
  if (impl_) {
    impl_->stop.store(true);
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(impl_->box->wake, &one, sizeof one);
  }
  if (thread_.joinable())
    thread_.join();
  if (impl_) {
    // Replies still held elsewhere find the mailbox gone.
    impl_->box.reset();
  }
}

http_server_stats http_server::stats() const {
  std::lock_guard<std::mutex> guard{impl_->stats_mutex};
  return impl_->stats;
}

} // namespace tasksup::app
