// The HTTP server with real loopback sockets: a handler that answers later
// holds up no one, a stalled request times out without blocking others, the
// oldest idle connection makes room for a new one, and a stream's client
// that does not read is dropped instead of buffered.

#include "../socket_read.hpp"
#include "http_server.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

using namespace tasksup::app;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_text(int fd, const std::string& text) {
  REQUIRE(::send(fd, text.data(), text.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(text.size()));
}

using tasksup::test::read_until;

using tasksup::test::read_all;

std::string request(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

/// Bounded wait for `cond`, checked every millisecond.
template<class Cond>
bool eventually(Cond cond, std::chrono::milliseconds limit = 10s) {
  auto deadline = steady::now() + limit;
  while (!cond()) {
    if (steady::now() > deadline)
      return false;
    ::poll(nullptr, 0, 1);
  }
  return true;
}

/// A server whose handler answers /fast at once and keeps the replies of
/// every other path for the test to answer.
struct fixture {
  std::mutex mutex;
  std::map<std::string, http_reply> held;
  std::unique_ptr<http_server> server;

  explicit fixture(http_server_options opts = {}) {
    std::string err;
    server = http_server::start(
      opts,
      [this](const http_request& req, http_reply reply) {
        if (req.path == "/fast") {
          reply.send(text_response(200, "fast"));
          return;
        }
        std::lock_guard<std::mutex> guard{mutex};
        held[req.path] = std::move(reply);
      },
      err);
    REQUIRE(server);
  }

  std::optional<http_reply> reply_of(const std::string& path) {
    std::lock_guard<std::mutex> guard{mutex};
    auto i = held.find(path);
    if (i == held.end())
      return std::nullopt;
    return i->second;
  }

  http_reply wait_reply(const std::string& path) {
    std::optional<http_reply> r;
    REQUIRE(eventually([&] { return (r = reply_of(path)).has_value(); }));
    return *r;
  }

  int port() const { return server->port(); }
};

} // namespace

TEST_CASE("http server: a request the handler answers later holds up no "
          "other request") {
  fixture f;
  int slow = connect_to(f.port());
  REQUIRE(slow >= 0);
  send_text(slow, request("/slow"));
  auto reply = f.wait_reply("/slow");
  // Meanwhile another client is answered.
  int fast = connect_to(f.port());
  send_text(fast, request("/fast"));
  auto answer = read_all(fast);
  ::close(fast);
  CHECK(answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(answer.find("\r\n\r\nfast") != std::string::npos);
  // The late answer arrives, once.
  CHECK(reply.open());
  reply.send(text_response(200, "late"));
  reply.send(text_response(500, "twice"));
  auto late = read_all(slow);
  ::close(slow);
  CHECK(late.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(late.find("late") != std::string::npos);
  CHECK(late.find("twice") == std::string::npos);
  CHECK(f.server->stats().requests == 2);
}

TEST_CASE("http server: a stalled partial request is answered 408 and does "
          "not block another") {
  http_server_options opts;
  opts.request_timeout = 500ms;
  fixture f{opts};
  int stalled = connect_to(f.port());
  send_text(stalled, "GET /fast HTTP/1.1\r\nHost: 12");
  int other = connect_to(f.port());
  send_text(other, request("/fast"));
  CHECK(read_all(other).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  ::close(other);
  CHECK(read_all(stalled).rfind("HTTP/1.1 408 ", 0) == 0);
  ::close(stalled);
  CHECK(f.server->stats().timed_out == 1);
}

TEST_CASE("http server: a handler that never answers gets 503 after the "
          "answer timeout") {
  http_server_options opts;
  opts.answer_timeout = 300ms;
  fixture f{opts};
  int fd = connect_to(f.port());
  send_text(fd, request("/never"));
  CHECK(read_all(fd).rfind("HTTP/1.1 503 ", 0) == 0);
  ::close(fd);
  // The reply knows its connection is gone.
  CHECK_FALSE(f.wait_reply("/never").open());
}

TEST_CASE("http server: at the connection limit the oldest idle connection "
          "makes room") {
  http_server_options opts;
  opts.max_connections = 2;
  fixture f{opts};
  int oldest = connect_to(f.port());
  send_text(oldest, "GET /fast HTTP/1.1\r\n"); // idle: never completes
  int busy = connect_to(f.port());
  send_text(busy, request("/held"));
  auto held = f.wait_reply("/held");
  REQUIRE(eventually([&] { return f.server->stats().requests == 1; }));
  int fresh = connect_to(f.port());
  send_text(fresh, request("/fast"));
  CHECK(read_all(fresh).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  ::close(fresh);
  // The idle one was closed for it; the one waiting for its answer kept.
  CHECK(read_all(oldest, 2s).rfind("HTTP/1.1 503 ", 0) == 0);
  ::close(oldest);
  CHECK(f.server->stats().evicted == 1);
  CHECK(held.open());
  held.send(text_response(200, "kept"));
  CHECK(read_all(busy).find("kept") != std::string::npos);
  ::close(busy);
}

TEST_CASE("http server: when every connection waits for its answer a new "
          "one gets 503") {
  http_server_options opts;
  opts.max_connections = 1;
  fixture f{opts};
  int busy = connect_to(f.port());
  send_text(busy, request("/held"));
  auto held = f.wait_reply("/held");
  int fresh = connect_to(f.port());
  send_text(fresh, request("/fast"));
  CHECK(read_all(fresh).rfind("HTTP/1.1 503 ", 0) == 0);
  ::close(fresh);
  CHECK(f.server->stats().rejected == 1);
  held.send(text_response(200, "kept"));
  CHECK(read_all(busy).find("kept") != std::string::npos);
  ::close(busy);
}

TEST_CASE("http server: a stream delivers what is pushed until either side "
          "ends it") {
  fixture f;
  int fd = connect_to(f.port());
  send_text(fd, request("/stream"));
  auto reply = f.wait_reply("/stream");
  http_response head;
  head.content_type = "text/event-stream";
  head.body = "event: hello\ndata: {}\n\n";
  reply.open_stream(head);
  auto first = read_until(
    fd, [](const std::string& s) { return s.find("hello") != s.npos; }, 10s);
  CHECK(first.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(first.find("Content-Type: text/event-stream") != std::string::npos);
  CHECK(first.find("Content-Length") == std::string::npos);
  CHECK(reply.push("data: one\n\n"));
  auto more = read_until(
    fd, [](const std::string& s) { return s.find("one") != s.npos; }, 10s);
  CHECK(more == "data: one\n\n");
  // The producer ends it: what was pushed arrives, then the end.
  CHECK(reply.push("data: two\n\n"));
  reply.close();
  CHECK(read_all(fd) == "data: two\n\n");
  ::close(fd);
  CHECK(eventually([&] { return !reply.open(); }));

  // The client ends it: the producer learns it.
  int other = connect_to(f.port());
  send_text(other, request("/stream2"));
  auto reply2 = f.wait_reply("/stream2");
  reply2.open_stream(head);
  read_until(
    other, [](const std::string& s) { return s.find("hello") != s.npos; }, 10s);
  ::close(other);
  CHECK(eventually([&] {
    reply2.push(": ping\n\n");
    return !reply2.open();
  }));
}

TEST_CASE("http server: a stream's client that does not read is dropped, "
          "not buffered without limit") {
  http_server_options opts;
  opts.max_stream_backlog = 64 * 1024;
  fixture f{opts};
  int fd = connect_to(f.port());
  send_text(fd, request("/stream"));
  auto reply = f.wait_reply("/stream");
  reply.open_stream(http_response{});
  std::string chunk(16 * 1024, 'x');
  // The kernel's socket buffers take a few MiB; after that the server's
  // backlog grows past its bound and the stream ends. Bounded: 256 MiB.
  int pushed = 0;
  CHECK(eventually(
    [&] {
      if (reply.push(chunk))
        ++pushed;
      return !reply.open() || pushed > 16384;
    },
    30s));
  CHECK_FALSE(reply.open());
  CHECK(f.server->stats().streams_dropped == 1);
  ::close(fd);
  // The server goes on.
  int other = connect_to(f.port());
  send_text(other, request("/fast"));
  CHECK(read_all(other).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  ::close(other);
}
