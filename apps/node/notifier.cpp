#include "notifier.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace tasksup::app {

using steady = std::chrono::steady_clock;

expected<http_url> parse_http_url(const std::string& text) {
  auto bad = [&](const std::string& what) -> expected<http_url> {
    return tasksup::error{"--notify-url", "", what + ", got '" + text + "'"};
  };
  static constexpr std::string_view scheme = "http://";
  if (text.compare(0, scheme.size(), scheme) != 0)
    return bad("expected http://HOST[:PORT][/PATH] (https is not supported)");
  auto rest = text.substr(scheme.size());
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  http_url u;
  u.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.empty() || authority.find('@') != std::string::npos)
    return bad("expected a host");
  std::string port_text;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos)
      return bad("unbalanced [ in the host");
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':')
        return bad("expected :PORT after the host");
      port_text = authority.substr(close + 2);
    }
  } else {
    auto colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos)
      port_text = authority.substr(colon + 1);
  }
  if (u.host.empty())
    return bad("expected a host");
  if (!port_text.empty() || authority.back() == ':') {
    if (port_text.empty() || port_text.size() > 5 ||
        !std::all_of(port_text.begin(), port_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      return bad("expected a port number");
    auto p = std::stoul(port_text);
    if (p == 0 || p > 65535)
      return bad("expected a port from 1 to 65535");
    u.port = static_cast<std::uint16_t>(p);
  }
  for (char c : u.path)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return bad("the path has a space or control character");
  return u;
}

std::chrono::milliseconds notify_delay(int n, std::chrono::milliseconds first,
                                       std::chrono::milliseconds max) {
  auto d = first;
  for (int i = 1; i < n && d < max; ++i)
    d *= 2;
  return std::min(d, max);
}

namespace {

/// Milliseconds left until `deadline` (at least 0).
int left_ms(steady::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - steady::now())
                .count();
  return static_cast<int>(std::max<long long>(0, left));
}

} // namespace

std::string run_hook_command(const std::vector<std::string>& argv,
                             const std::string& input,
                             std::chrono::milliseconds timeout) {
  if (argv.empty())
    return "no command";
  // A socket pair, not a pipe: a command that closes its stdin early must
  // not raise SIGPIPE in the node (send with MSG_NOSIGNAL below).
  int in[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0)
    return std::string{"socketpair: "} + std::strerror(errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout ends whatever it started.
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                    POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  std::vector<std::string> store = argv;
  for (auto& a : store)
    args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  if (rc != 0) {
    ::close(in[1]);
    return "cannot run " + argv[0] + ": " + std::strerror(rc);
  }
  auto deadline = steady::now() + timeout;
  // Feed stdin without blocking past the deadline.
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  std::size_t sent = 0;
  while (sent < input.size() && left_ms(deadline) > 0) {
    pollfd p{in[1], POLLOUT, 0};
    if (::poll(&p, 1, std::min(left_ms(deadline), 100)) <= 0)
      continue;
    auto n =
      ::send(in[1], input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EAGAIN && errno != EINTR)
      break; // the command closed its stdin: its business
  }
  ::close(in[1]);
  int status = 0;
  for (;;) {
    auto r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (left_ms(deadline) == 0) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return argv[0] + " did not finish within " +
             std::to_string(timeout.count()) + " ms (killed)";
    }
    // No SIGCHLD handling in the node: poll the child's end gently.
    ::usleep(10000);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return {};
  if (WIFEXITED(status))
    return argv[0] + " exited with " + std::to_string(WEXITSTATUS(status));
  return argv[0] + " was killed by signal " + std::to_string(WTERMSIG(status));
}

std::string post_json(const http_url& url, const std::string& body,
                      std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res);
      rc != 0)
    return "cannot resolve " + url.host + ": " + ::gai_strerror(rc);
  int fd = -1;
  std::string why = "cannot connect";
  for (auto* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
    if (fd < 0)
      continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
        errno != EINPROGRESS) {
      why = std::string{"connect: "} + std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, left_ms(deadline)) <= 0 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      why = err ? std::string{"connect: "} + std::strerror(err)
                : std::string{"connect timed out"};
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return why + " (" + url.host + ":" + port + ")";
  std::string host =
    url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  std::string req =
    "POST " + url.path + " HTTP/1.1\r\nHost: " + host + ":" + port +
    "\r\nContent-Type: application/json\r\n"
    "User-Agent: tasksup-notifier\r\nContent-Length: " +
    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  std::size_t sent = 0;
  while (sent < req.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0) {
      ::close(fd);
      return "sending timed out";
    }
    auto n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      ::close(fd);
      return std::string{"send: "} + std::strerror(errno);
    }
    if (n > 0)
      sent += static_cast<std::size_t>(n);
  }
  // The status line is all we need.
  std::string answer;
  while (answer.find("\r\n") == std::string::npos && answer.size() < 1024) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0)
      break;
    char buf[512];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12)
    return "no HTTP answer";
  auto code = answer.substr(9, 3);
  if (code[0] == '2')
    return {};
  auto eol = answer.find("\r\n");
  return "answered " + answer.substr(9, eol == std::string::npos
                                          ? std::string::npos
                                          : eol - 9);
}

notifier::notifier(notifier_options opts, log_fn log)
  : opts_(std::move(opts)), log_(std::move(log)) {
  if (!opts_.url.empty())
    if (auto u = parse_http_url(opts_.url))
      url_ = *u;
  thread_ = std::thread{[this] { run(); }};
}

notifier::~notifier() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void notifier::offer(const std::string& task_id, const std::string& outcome,
                     const std::string& json) {
  if (opts_.outcomes.count(outcome) == 0)
    return;
  std::vector<job> jobs;
  if (!opts_.command.empty())
    jobs.push_back({task_id, json, "command", 0, {}, {}});
  if (url_)
    jobs.push_back({task_id, json, "url", 0, {}, {}});
  enqueue(std::move(jobs));
}

void notifier::offer_to(const std::string& task_id, const std::string& json,
                        std::vector<std::string> command,
                        std::optional<http_url> url) {
  std::vector<job> jobs;
  if (!command.empty())
    jobs.push_back({task_id, json, "command", 0, std::move(command), {}});
  if (url)
    jobs.push_back({task_id, json, "url", 0, {}, std::move(url)});
  enqueue(std::move(jobs));
}

void notifier::enqueue(std::vector<job> jobs) {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    for (auto& j : jobs) {
      if (due_.size() >= opts_.max_queue) {
        // Drop the most delayed one: a hook down for long loses the
        // oldest retries, never the node's memory.
        auto last = std::prev(due_.end());
        notify_report r{
          last->second.task_id, last->second.target, last->second.tries, false,
          "dropped: more than " + std::to_string(opts_.max_queue) +
            " notifications waiting"};
        due_.erase(last);
        if (log_)
          log_(r, true);
      }
      due_.emplace(steady::now(), std::move(j));
    }
  }
  cv_.notify_all();
}

std::string notifier::deliver(const job& j) {
  if (j.target == "command")
    return run_hook_command(j.command.empty() ? opts_.command : j.command,
                            j.json + "\n", opts_.timeout);
  return post_json(j.url ? *j.url : *url_, j.json, opts_.timeout);
}

void notifier::run() {
  std::unique_lock<std::mutex> lock{mutex_};
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    if (first->first > steady::now()) {
      cv_.wait_until(lock, first->first);
      continue;
    }
    auto j = std::move(first->second);
    due_.erase(first);
    lock.unlock();
    ++j.tries;
    auto err = deliver(j);
    notify_report r{j.task_id, j.target, j.tries, err.empty(), err};
    bool final = err.empty() || j.tries >= opts_.max_tries;
    if (log_)
      log_(r, final);
    lock.lock();
    if (!final)
      due_.emplace(steady::now() +
                     notify_delay(j.tries, opts_.first_delay, opts_.max_delay),
                   std::move(j));
  }
}

} // namespace tasksup::app
