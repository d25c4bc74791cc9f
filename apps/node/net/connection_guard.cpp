#include "connection_guard.hpp"
#include "basp_frames.hpp"
#include "listen_socket.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <pwd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tasksup::app {

namespace {

using clock_type = std::chrono::steady_clock;

/// Bytes buffered per direction and connection; reading stops when full,
/// so a peer faster than the node is slowed down, not buffered.
constexpr std::size_t relay_buffer_bytes = 16 * 1024;

/// Descriptors kept free for the rest of the node (attempt pipes, logs).
constexpr std::size_t reserved_descriptors = 256;

/// How long a descriptor number CAF had for a connection is not given to
/// CAF for another. CAF 0.17's BASP broker names a connection by its
/// descriptor number and forgets a closed one only when its cleanup comes
/// out of the BASP message queue, behind every message received before the
/// close; a new connection under the same number before that inherits the
/// old one's routing state, then loses it (and the reply to its first
/// request) when the cleanup runs. Milliseconds usually; held far longer.
constexpr std::chrono::seconds handle_quarantine{10};

/// Epoll tags for the listener and the wake-up eventfd; connections use
/// (id << 1) | side with ids from 1.
constexpr std::uint64_t listener_tag = 0;
constexpr std::uint64_t wake_tag = 1;

/// One relayed connection: the peer's socket and our end of the pair.
struct link {
  int peer = -1;
  /// Our end of the socket pair CAF has the other end of; with TLS, -1
  /// until the handshake is complete (a refused peer never reaches CAF).
  int node = -1;
  /// The descriptor number of CAF's end (CAF's name for the connection).
  int caf_handle = -1;
  /// The TLS session (null for plain TCP).
  SSL* ssl = nullptr;
  bool handshaking = false;
  /// The last TLS call waits for bytes from the peer / room to write to it.
  bool tls_wants_in = false;
  bool tls_wants_out = false;
  std::string up;   // peer -> node (plaintext), not yet written
  std::string down; // node -> peer (plaintext), not yet written
  frame_reader frames;
  /// The peer's certificate, once the TLS handshake is done; and whether
  /// `on_client` was told of it.
  peer_certificate cert;
  bool client_reported = false;
  clock_type::time_point accepted_at;
  clock_type::time_point last_peer_byte;
};

/// The certificate the peer showed: its subject, one line (RFC 2253,
/// non-ASCII escaped; empty when none), and whether it is a node
/// certificate (extended key usage serverAuth, or no usage stated).
peer_certificate peer_certificate_of(SSL* ssl) {
  peer_certificate out;
  X509* cert = SSL_get_peer_certificate(ssl);
  if (cert == nullptr)
    return out;
  out.node_certificate =
    (X509_get_extended_key_usage(cert) & XKU_SSL_SERVER) != 0;
  if (BIO* bio = BIO_new(BIO_s_mem())) {
    if (X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0,
                           XN_FLAG_RFC2253) >= 0) {
      char* data = nullptr;
      auto n = BIO_get_mem_data(bio, &data);
      if (n > 0 && data != nullptr)
        out.subject.assign(data, static_cast<std::size_t>(n));
    }
    BIO_free(bio);
  }
  X509_free(cert);
  return out;
}

/// `host:port` of the peer of `fd`, for the log.
std::string peer_text(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string{host} + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string{host} +
           "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "an unknown peer";
}

/// Why a TLS handshake failed, in OpenSSL's words (never the peer's bytes).
std::string handshake_failure(SSL* ssl, int ssl_error) {
  auto verify = SSL_get_verify_result(ssl);
  std::string out;
  if (verify != X509_V_OK)
    out = std::string{"certificate refused: "} +
          X509_verify_cert_error_string(verify);
  else if (auto code = ERR_peek_error(); code != 0) {
    auto* reason = ERR_reason_error_string(code);
    out = reason != nullptr ? reason : "TLS error";
  } else if (ssl_error == SSL_ERROR_SYSCALL ||
             ssl_error == SSL_ERROR_ZERO_RETURN)
    out = "the peer closed the connection during the handshake";
  else
    out = "TLS error";
  ERR_clear_error();
  return out;
}

/// The effective user's name, for the --insecure warning.
std::string effective_user() {
  auto uid = ::geteuid();
  if (auto* pw = ::getpwuid(uid); pw != nullptr && pw->pw_name != nullptr)
    return pw->pw_name;
  return "uid " + std::to_string(uid);
}

void set_nonblocking(int fd) {
  auto flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/// The first descriptor number CAF's ends are not given: the soft limit,
/// at most 16,384 (higher numbers would only grow the kernel's descriptor
/// table; the rotation needs a few thousand).
int descriptor_ceiling() {
  constexpr int most = 16384;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
      lim.rlim_cur > static_cast<rlim_t>(most))
    return most;
  return static_cast<int>(lim.rlim_cur);
}

std::size_t descriptor_budget(std::size_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return wanted;
  auto fds = static_cast<std::size_t>(lim.rlim_cur);
  // Three descriptors per connection: the peer's, ours and CAF's end.
  auto fit = fds > reserved_descriptors ? (fds - reserved_descriptors) / 3 : 1;
  return std::max<std::size_t>(1, std::min(wanted, fit));
}

} // namespace

struct connection_guard::impl {
  connection_guard_options opts;
  adopt_fn adopt;
  int listener = -1;
  int epoll = -1;
  int wake = -1;
  std::size_t max_links = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> close_listener_requested{false};
  std::unordered_map<std::uint64_t, link> links;
  std::uint64_t next_id = 1;
  mutable std::mutex stats_mutex;
  connection_guard_stats counters;
  /// The next descriptor number to try for CAF's end of a socket pair, and
  /// the limit numbers stay under.
  int next_handle = 3;
  int handle_ceiling = 1024;
  /// Numbers CAF had for connections the guard has dropped, with when:
  /// not given to CAF again for `handle_quarantine`.
  std::unordered_map<int, clock_type::time_point> retired_handles;
  /// Refused handshakes not logged yet, and when the last log line was.
  std::size_t unlogged_refusals = 0;
  std::optional<clock_type::time_point> last_refusal_log;

  ~impl() {
    for (auto& kv : links)
      release(kv.second);
    for (int fd : {listener, epoll, wake})
      if (fd >= 0)
        ::close(fd);
  }

  void count(std::size_t connection_guard_stats::*field) {
    std::lock_guard<std::mutex> guard{stats_mutex};
    ++(counters.*field);
  }

  void watch(std::uint64_t id, link& l) {
    auto mod = [&](int fd, std::uint64_t tag, std::uint32_t want) {
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = tag;
      ::epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &ev);
    };
    std::uint32_t peer_events = 0;
    std::uint32_t node_events = 0;
    if (l.ssl != nullptr) {
      // TLS: poll for what the last TLS call waits for; once established,
      // also for the peer's bytes while there is room for them.
      if (l.tls_wants_in ||
          (!l.handshaking && l.up.size() < relay_buffer_bytes))
        peer_events |= EPOLLIN;
      if (l.tls_wants_out)
        peer_events |= EPOLLOUT;
    } else {
      if (l.up.size() < relay_buffer_bytes)
        peer_events |= EPOLLIN;
      if (!l.down.empty())
        peer_events |= EPOLLOUT;
    }
    if (l.down.size() < relay_buffer_bytes)
      node_events |= EPOLLIN;
    if (!l.up.empty())
      node_events |= EPOLLOUT;
    mod(l.peer, id << 1, peer_events);
    if (l.node >= 0)
      mod(l.node, (id << 1) | 1, node_events);
  }

  /// Closes a connection's descriptors (which also removes them from
  /// epoll) and frees its TLS session.
  static void release(link& l) {
    if (l.ssl != nullptr)
      SSL_free(l.ssl);
    ::close(l.peer);
    if (l.node >= 0)
      ::close(l.node);
  }

  void drop(std::uint64_t id) {
    auto i = links.find(id);
    if (i == links.end())
      return;
    if (i->second.caf_handle >= 0)
      retired_handles[i->second.caf_handle] = clock_type::now();
    release(i->second);
    links.erase(i);
  }

  /// Moves `fd` (CAF's end of a new socket pair) to a descriptor number CAF
  /// has not had for a connection within `handle_quarantine`: numbers are
  /// taken in rotation through the whole descriptor range, so one comes
  /// back only after thousands of other connections, and a recently
  /// retired one is skipped. Returns the descriptor to give CAF, or -1
  /// (and closes `fd`) when every number is taken or quarantined.
  int fresh_handle(int fd) {
    auto now = clock_type::now();
    int wraps = 0;
    for (;;) {
      if (next_handle >= handle_ceiling) {
        next_handle = 3;
        if (++wraps > 1)
          break;
      }
      int h = ::fcntl(fd, F_DUPFD_CLOEXEC, next_handle);
      if (h < 0) {
        // Nothing free at or above next_handle: go round.
        next_handle = handle_ceiling;
        continue;
      }
      next_handle = h + 1;
      auto r = retired_handles.find(h);
      if (r != retired_handles.end() && now - r->second < handle_quarantine) {
        ::close(h);
        continue;
      }
      retired_handles.erase(h);
      ::close(fd);
      return h;
    }
    ::close(fd);
    return -1;
  }

  /// Gives CAF's BASP broker one end of a new socket pair for `l`; false
  /// when that failed (the caller drops the connection).
  bool attach_node(std::uint64_t id, link& l) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return false;
    set_nonblocking(pair[0]);
    int handle = fresh_handle(pair[1]);
    if (handle < 0) {
      count(&connection_guard_stats::no_handle);
      ::close(pair[0]);
      return false;
    }
    // CAF owns the handle from here on, whatever adopt returns.
    if (!adopt(handle)) {
      ::close(pair[0]);
      return false;
    }
    count(&connection_guard_stats::accepted);
    l.node = pair[0];
    l.caf_handle = handle;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = (id << 1) | 1;
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, l.node, &ev);
    return true;
  }

  /// Tells `on_client` who the peer of `l` is, once its client handshake
  /// is complete (before the handshake reaches CAF).
  void report_client(link& l) {
    if (l.client_reported || !l.frames.handshake_complete)
      return;
    l.client_reported = true;
    if (opts.on_client && !l.cert.subject.empty())
      opts.on_client(l.frames.handshake, l.cert);
    l.frames.handshake = std::string{};
  }

  /// Counts a refused handshake and logs it: the first at once, later ones
  /// summed up at most once per `refusal_log_interval`.
  void refused(const link& l, const std::string& reason) {
    count(&connection_guard_stats::refused_handshakes);
    auto now = clock_type::now();
    if (last_refusal_log &&
        now - *last_refusal_log < opts.refusal_log_interval) {
      ++unlogged_refusals;
      return;
    }
    if (unlogged_refusals > 0)
      spdlog::warn("refused a TLS connection from {}: {} ({} more refused "
                   "since the last report)",
                   peer_text(l.peer), reason, unlogged_refusals);
    else
      spdlog::warn("refused a TLS connection from {}: {}", peer_text(l.peer),
                   reason);
    last_refusal_log = now;
    unlogged_refusals = 0;
  }

  /// The summary of refusals not logged yet, once the interval has passed.
  void report_refusals(clock_type::time_point now) {
    if (unlogged_refusals == 0 || !last_refusal_log ||
        now - *last_refusal_log < opts.refusal_log_interval)
      return;
    spdlog::warn("refused {} more TLS connection(s) in the last {} s",
                 unlogged_refusals, opts.refusal_log_interval.count());
    last_refusal_log = now;
    unlogged_refusals = 0;
  }

  /// Moves what can move on a TLS connection: the handshake, then
  /// peer -> node (decrypted, frame-checked) and node -> peer (encrypted),
  /// until nothing moves. False when the connection is to be dropped.
  bool pump_tls(std::uint64_t id, link& l) {
    auto* ssl = l.ssl;
    if (l.handshaking) {
      ERR_clear_error();
      int r = SSL_do_handshake(ssl);
      if (r != 1) {
        int e = SSL_get_error(ssl, r);
        l.tls_wants_in = e == SSL_ERROR_WANT_READ;
        l.tls_wants_out = e == SSL_ERROR_WANT_WRITE;
        if (l.tls_wants_in || l.tls_wants_out)
          return true;
        refused(l, handshake_failure(ssl, e));
        return false;
      }
      l.handshaking = false;
      l.tls_wants_in = false;
      l.tls_wants_out = false;
      l.cert = peer_certificate_of(ssl);
      if (!attach_node(id, l))
        return false;
    }
    char chunk[relay_buffer_bytes];
    for (;;) {
      bool moved = false;
      l.tls_wants_in = false;
      l.tls_wants_out = false;
      while (l.up.size() < relay_buffer_bytes) {
        auto room = static_cast<int>(relay_buffer_bytes - l.up.size());
        ERR_clear_error();
        int n = SSL_read(ssl, chunk, room);
        if (n <= 0) {
          int e = SSL_get_error(ssl, n);
          if (e == SSL_ERROR_WANT_READ)
            break;
          if (e == SSL_ERROR_WANT_WRITE) {
            l.tls_wants_out = true;
            break;
          }
          ERR_clear_error();
          return false; // closed by the peer, or a TLS error
        }
        l.last_peer_byte = clock_type::now();
        auto bytes = static_cast<std::size_t>(n);
        if (!l.frames.consume(reinterpret_cast<const unsigned char*>(chunk),
                              bytes, opts.max_payload_bytes)) {
          count(&connection_guard_stats::oversized);
          return false;
        }
        report_client(l);
        l.up.append(chunk, bytes);
        moved = true;
      }
      auto up_before = l.up.size();
      auto down_before = l.down.size();
      if (!flush(l.node, l.up) ||
          !fill(l.node, l.down, [](const char*, std::size_t) { return true; }))
        return false;
      moved = moved || l.up.size() != up_before || l.down.size() != down_before;
      while (!l.down.empty()) {
        ERR_clear_error();
        int n = SSL_write(ssl, l.down.data(), static_cast<int>(l.down.size()));
        if (n <= 0) {
          int e = SSL_get_error(ssl, n);
          if (e == SSL_ERROR_WANT_WRITE) {
            l.tls_wants_out = true;
            break;
          }
          if (e == SSL_ERROR_WANT_READ) {
            l.tls_wants_in = true;
            break;
          }
          ERR_clear_error();
          return false;
        }
        l.down.erase(0, static_cast<std::size_t>(n));
        moved = true;
      }
      if (!moved)
        return true;
    }
  }

  /// Writes what is buffered for `fd`; false on a broken connection.
  static bool flush(int fd, std::string& buf) {
    while (!buf.empty()) {
      auto n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
      if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      buf.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  /// Reads what fits into `buf`; false on EOF or error. `on_bytes` sees
  /// each chunk and may refuse it.
  template<class F>
  static bool fill(int fd, std::string& buf, F on_bytes) {
    char chunk[relay_buffer_bytes];
    while (buf.size() < relay_buffer_bytes) {
      auto room = relay_buffer_bytes - buf.size();
      auto n = ::recv(fd, chunk, room, 0);
      if (n == 0)
        return false;
      if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (!on_bytes(chunk, static_cast<std::size_t>(n)))
        return false;
      buf.append(chunk, static_cast<std::size_t>(n));
    }
    return true;
  }

  void on_event(std::uint64_t tag, std::uint32_t events) {
    auto id = tag >> 1;
    bool from_node = (tag & 1) != 0;
    auto i = links.find(id);
    if (i == links.end())
      return;
    auto& l = i->second;
    // A hang-up while this side's buffer is full (so it was not polled for
    // input) would be reported again and again: the peer is gone, drop it.
    if ((events & (EPOLLHUP | EPOLLERR)) != 0 && (events & EPOLLIN) == 0) {
      drop(id);
      return;
    }
    if (l.ssl != nullptr) {
      if (!from_node && (events & EPOLLIN) != 0)
        l.last_peer_byte = clock_type::now();
      if (!pump_tls(id, l)) {
        drop(id);
        return;
      }
      watch(id, l);
      return;
    }
    bool ok = true;
    if (events & EPOLLIN) {
      if (from_node) {
        ok =
          fill(l.node, l.down, [](const char*, std::size_t) { return true; });
      } else {
        ok = fill(l.peer, l.up, [&](const char* data, std::size_t n) {
          l.last_peer_byte = clock_type::now();
          if (l.frames.consume(reinterpret_cast<const unsigned char*>(data), n,
                               opts.max_payload_bytes))
            return true;
          count(&connection_guard_stats::oversized);
          return false;
        });
      }
    }
    ok = ok && flush(l.node, l.up) && flush(l.peer, l.down);
    if (!ok) {
      drop(id);
      return;
    }
    watch(id, l);
  }

  /// Which connection goes first when the cap is reached: one that has not
  /// finished its handshakes, then a client's, last a worker node's (it
  /// showed a node certificate), so anonymous connections cannot push a
  /// joined worker out.
  static int eviction_rank(const link& l) {
    if (!l.frames.handshake_complete)
      return 0;
    return l.cert.node_certificate ? 2 : 1;
  }

  /// Closes a connection of the lowest rank, the one whose peer has been
  /// silent longest among them.
  void evict_most_idle() {
    auto victim =
      std::min_element(links.begin(), links.end(), [](auto& a, auto& b) {
        auto ra = eviction_rank(a.second);
        auto rb = eviction_rank(b.second);
        if (ra != rb)
          return ra < rb;
        return a.second.last_peer_byte < b.second.last_peer_byte;
      });
    if (victim == links.end())
      return;
    count(&connection_guard_stats::evicted);
    drop(victim->first);
  }

  void accept_all() {
    for (;;) {
      int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        if ((errno == EMFILE || errno == ENFILE) && !links.empty()) {
          evict_most_idle();
          continue;
        }
        return; // EAGAIN, or nothing left to free
      }
      if (links.size() >= max_links)
        evict_most_idle();
      // The guard writes whole frames; Nagle's algorithm would hold a
      // reply's second segment until the peer's delayed ACK (40 ms).
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto id = next_id++;
      auto& l = links[id];
      l.peer = fd;
      l.accepted_at = clock_type::now();
      l.last_peer_byte = l.accepted_at;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = id << 1;
      ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev);
      if (opts.tls) {
        // CAF gets its end of a socket pair once the handshake is done.
        l.ssl = SSL_new(opts.tls.get());
        if (l.ssl == nullptr || SSL_set_fd(l.ssl, fd) != 1) {
          ERR_clear_error();
          drop(id);
          continue;
        }
        SSL_set_accept_state(l.ssl);
        l.handshaking = true;
        l.tls_wants_in = true;
      } else if (!attach_node(id, l)) {
        drop(id);
      }
    }
  }

  void sweep() {
    auto now = clock_type::now();
    std::vector<std::uint64_t> expired;
    for (auto& [id, l] : links) {
      // A handshake has the frame timeout from the accept to complete,
      // however slowly the peer trickles bytes.
      if (l.handshaking && now - l.accepted_at > opts.frame_timeout) {
        expired.push_back(id);
        continue;
      }
      auto silent = now - l.last_peer_byte;
      auto limit =
        l.frames.mid_frame() ? opts.frame_timeout : opts.idle_timeout;
      if (silent > limit)
        expired.push_back(id);
    }
    for (auto id : expired) {
      count(&connection_guard_stats::timed_out);
      drop(id);
    }
    for (auto i = retired_handles.begin(); i != retired_handles.end();) {
      if (now - i->second >= handle_quarantine)
        i = retired_handles.erase(i);
      else
        ++i;
    }
    report_refusals(now);
  }

  void run() {
    // OpenSSL writes to the peer's socket without MSG_NOSIGNAL: a peer that
    // has gone would raise SIGPIPE and kill the node. Blocked on this thread
    // (the signal is raised on the writing thread), the write fails with
    // EPIPE instead and the connection is dropped.
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    epoll_event events[64];
    auto next_sweep = clock_type::now();
    while (!stopping) {
      int n = ::epoll_wait(epoll, events, 64, 250);
      for (int k = 0; k < n; ++k) {
        auto tag = events[k].data.u64;
        if (tag == wake_tag) {
          std::uint64_t ignored = 0;
          [[maybe_unused]] auto r = ::read(wake, &ignored, sizeof ignored);
          if (close_listener_requested && listener >= 0) {
            ::close(listener);
            listener = -1;
          }
        } else if (tag == listener_tag) {
          if (listener >= 0)
            accept_all();
        } else {
          on_event(tag, events[k].events);
        }
      }
      auto now = clock_type::now();
      if (now >= next_sweep) {
        sweep();
        next_sweep = now + std::chrono::milliseconds{250};
      }
    }
  }

  void poke() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(wake, &one, sizeof one);
  }
};

std::unique_ptr<connection_guard>
connection_guard::start(const connection_guard_options& opts, adopt_fn adopt,
                        std::string& err) {
  auto st = std::make_unique<impl>();
  st->opts = opts;
  st->adopt = std::move(adopt);
  st->max_links = descriptor_budget(opts.max_connections);
  st->handle_ceiling = descriptor_ceiling();
  st->listener = open_listener(opts.host, opts.port, err);
  if (st->listener < 0)
    return nullptr;
  auto port = bound_port(st->listener);
  st->epoll = ::epoll_create1(EPOLL_CLOEXEC);
  st->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->epoll < 0 || st->wake < 0) {
    err = std::strerror(errno);
    return nullptr;
  }
  for (auto [fd, tag] :
       {std::pair{st->listener, listener_tag}, std::pair{st->wake, wake_tag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(st->epoll, EPOLL_CTL_ADD, fd, &ev);
  }
  if (!opts.tls)
    spdlog::warn("--insecure: no TLS on {}:{}; anyone who can reach this "
                 "port can run commands as {}",
                 opts.host, port, effective_user());
  std::unique_ptr<connection_guard> out{new connection_guard};
  out->port_ = port;
  out->impl_ = std::move(st);
  out->thread_ = std::thread{[p = out->impl_.get()] { p->run(); }};
  return out;
}

connection_guard::~connection_guard() {
  if (impl_) {
    impl_->stopping = true;
    impl_->poke();
  }
  if (thread_.joinable())
    thread_.join();
}

void connection_guard::close_listener() {
  impl_->close_listener_requested = true;
  impl_->poke();
}

connection_guard_stats connection_guard::stats() const {
  std::lock_guard<std::mutex> guard{impl_->stats_mutex};
  return impl_->counters;
}

} // namespace tasksup::app
