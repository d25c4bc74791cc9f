#pragma once

// The real tasksup binary as a child process that a test can watch while it
// runs: stdout and stderr go to files in a scratch directory (so nothing can
// block on a full pipe), waits have real deadlines, and signals can be sent
// at the moment a test chooses. For commands that simply run to their end,
// `run_to_end` is the one-call form.

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace tasksup::test {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Reads a whole file ("" when missing).
inline std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Polls `done` every 20 ms until it holds or `limit` passes; returns
/// whether it held. The deadline makes a hang a test failure, not a stall.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit) {
  auto deadline = steady::now() + limit;
  for (;;) {
    if (done())
      return true;
    if (steady::now() >= deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
}

/// A unique scratch directory, removed at scope exit.
class scratch {
public:
  scratch() {
    auto tmpl =
      (std::filesystem::temp_directory_path() / "tasksup-e2e-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error(std::string{"mkdtemp: "} + std::strerror(errno));
    path_ = tmpl;
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  /// `<dir>/<rel>`.
  std::string operator/(const std::string& rel) const {
    return path_ + "/" + rel;
  }

  /// Writes `content` to `rel`; returns the full path.
  std::string write(const std::string& rel, const std::string& content) const {
    auto full = *this / rel;
    std::ofstream out{full, std::ios::binary};
    out << content;
    return full;
  }

  /// Writes `content` to `rel` and makes it executable (a script for an
  /// agent or a preflight); returns the full path.
  std::string write_script(const std::string& rel,
                           const std::string& content) const {
    auto full = write(rel, content);
    std::filesystem::permissions(full, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    return full;
  }

  const std::string& path() const { return path_; }

private:
  std::string path_;
};

/// The environment of a tasksup child started in `dir`: the test's own,
/// with TASKSUP_STATE_DIR set to `<dir>/state` (where every node a test
/// starts keeps its state, and so its default certificates: the commands
/// run in the same scratch directory find them), XDG_CONFIG_HOME to
/// `<dir>/config` (where a node records itself as the current node: never
/// the user's own) and then `extra` ("NAME=value", replacing an entry of
/// the same name).
inline std::vector<std::string>
child_environment(const scratch& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> set{"TASKSUP_STATE_DIR=" + (dir / "state"),
                               "XDG_CONFIG_HOME=" + (dir / "config")};
  set.insert(set.end(), extra.begin(), extra.end());
  auto name_of = [](const std::string& entry) {
    return entry.substr(0, entry.find('='));
  };
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry{*e};
    bool replaced = false;
    for (auto& s : set)
      replaced = replaced || name_of(s) == name_of(entry);
    if (!replaced)
      out.push_back(std::move(entry));
  }
  // A later entry of `set` wins over an earlier one of the same name.
  for (std::size_t i = 0; i < set.size(); ++i) {
    bool overridden = false;
    for (std::size_t j = i + 1; j < set.size(); ++j)
      overridden = overridden || name_of(set[j]) == name_of(set[i]);
    if (!overridden)
      out.push_back(set[i]);
  }
  return out;
}

/// A running `tasksup` with its output going to files.
class tasksup_child {
public:
  /// Starts TASKSUP_BINARY with `args`; output files go into `dir` under
  /// `name`.out / `name`.err; stdin reads `stdin_path`; the environment is
  /// `child_environment(dir, env)`. With `program`, runs that instead of
  /// TASKSUP_BINARY (e.g. setpriv, to run tasksup as another user); `args`
  /// are then its whole argument list after argv[0].
  tasksup_child(const scratch& dir, const std::string& name,
                const std::vector<std::string>& args,
                const std::string& stdin_path = "/dev/null",
                const std::vector<std::string>& env = {},
                const std::string& program = TASKSUP_BINARY)
    : out_path_(dir / (name + ".out")), err_path_(dir / (name + ".err")) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, stdin_path.c_str(), O_RDONLY,
                                     0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> store{program};
    store.insert(store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : store)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    auto env_store = child_environment(dir, env);
    std::vector<char*> envp;
    for (auto& e : env_store)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    // The child must see SIGINT with its default disposition and unblocked.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigset_t all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc =
      ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0)
      throw std::runtime_error(std::string{"posix_spawn: "} +
                               std::strerror(rc));
  }

  tasksup_child(const tasksup_child&) = delete;
  tasksup_child& operator=(const tasksup_child&) = delete;

  /// A child still running when the test ends is killed and reaped.
  ~tasksup_child() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int ws = 0;
      ::waitpid(pid_, &ws, 0);
    }
  }

  /// The child's process id.
  pid_t pid() const noexcept { return pid_; }

  /// Sends `sig` to the child (if it has not been reaped).
  void signal(int sig) {
    if (!status_)
      ::kill(pid_, sig);
  }

  /// Whether the child has ended (reaps it).
  bool exited() {
    if (status_)
      return true;
    int ws = 0;
    auto r = ::waitpid(pid_, &ws, WNOHANG);
    if (r == pid_)
      status_ = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    return status_.has_value();
  }

  /// Waits up to `limit` for the end; returns the exit status (128+N when
  /// killed by signal N), or -1 when the deadline passed.
  int wait(std::chrono::milliseconds limit) {
    if (!eventually([this] { return exited(); }, limit))
      return -1;
    return *status_;
  }

  std::string out() const { return slurp(out_path_); }

  std::string err() const { return slurp(err_path_); }

private:
  pid_t pid_ = 0;
  std::optional<int> status_;
  std::string out_path_;
  std::string err_path_;
};

/// The port a `tasksup serve --listen 127.0.0.1:0` child logged that it
/// listens on, waited for up to `limit`; nullopt when it did not say so.
inline std::optional<int>
listening_port(const tasksup_child& child,
               std::chrono::milliseconds limit = std::chrono::seconds{20}) {
  std::optional<int> port;
  const std::regex listening{"listening on 127\\.0\\.0\\.1:([0-9]+)"};
  eventually(
    [&] {
      auto err = child.err();
      std::smatch m;
      if (!std::regex_search(err, m, listening))
        return false;
      port = std::stoi(m[1].str());
      return true;
    },
    limit);
  return port;
}

/// What a command that ran to its end left.
struct finished {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs tasksup with `args` to its end (at most `limit`), with the
/// environment of `child_environment(dir, env)`.
inline finished run_to_end(const scratch& dir,
                           const std::vector<std::string>& args,
                           std::chrono::milliseconds limit = 30s,
                           const std::vector<std::string>& env = {}) {
  static int counter = 0;
  tasksup_child child{dir, "cmd-" + std::to_string(++counter), args,
                      "/dev/null", env};
  finished f;
  f.status = child.wait(limit);
  f.out = child.out();
  f.err = child.err();
  return f;
}

/// The events of `evs` whose `event` is `kind`, in order.
inline std::vector<boost::json::object>
of_kind(const std::vector<boost::json::object>& evs, const std::string& kind) {
  std::vector<boost::json::object> out;
  for (auto& e : evs)
    if (e.at("event").as_string() == kind)
      out.push_back(e);
  return out;
}

/// The string at `key` in `e`; empty when it is absent or no string.
inline std::string text_at(const boost::json::object& e, const char* key) {
  auto* v = e.if_contains(key);
  return v && v->is_string() ? std::string{v->as_string()} : std::string{};
}

/// The JSON objects of a JSON-lines file or text, in order.
inline std::vector<boost::json::object> json_lines(const std::string& text) {
  std::vector<boost::json::object> out;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (!ec && v.is_object())
      out.push_back(v.get_object());
  }
  return out;
}

/// A loopback port nothing listens on right now.
inline int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// The name of the second, unprivileged local user tests run commands as
/// (a system user without a home directory, created on first use and kept
/// for later runs).
inline constexpr const char* other_user_name = "tasksup-test-other";

/// The uid and gid of `other_user_name`, created when missing; nullopt when
/// the test cannot have it (not root, or useradd failed).
inline std::optional<std::pair<uid_t, gid_t>> other_user() {
  if (::geteuid() != 0)
    return std::nullopt;
  if (::getpwnam(other_user_name) == nullptr) {
    [[maybe_unused]] int rc =
      std::system("useradd -M -r -s /usr/sbin/nologin tasksup-test-other "
                  ">/dev/null 2>&1");
  }
  auto* pw = ::getpwnam(other_user_name);
  if (pw == nullptr)
    return std::nullopt;
  return std::pair{pw->pw_uid, pw->pw_gid};
}

/// The source tree's config directory.
inline std::string config_dir() {
  return std::string{TASKSUP_SOURCE_DIR} + "/config";
}

/// An example file or agent under config/examples.
inline std::string example(const std::string& rel) {
  return std::string{TASKSUP_SOURCE_DIR} + "/config/examples/" + rel;
}

/// A `tasksup run` of a file, and the events it wrote.
struct run_with_events {
  finished run;
  std::vector<boost::json::object> events;
};

/// `tasksup run FILE` with the repository's config, its work in DIR/work
/// and its events in DIR/NAME.jsonl (at most 120 s).
inline run_with_events run_file(const scratch& dir, const std::string& name,
                                const std::string& file) {
  auto events = dir / (name + ".jsonl");
  run_with_events r;
  r.run = run_to_end(dir,
                     {"run", "--config", config_dir(), "--events", events,
                      "--work-dir", dir / "work", file},
                     std::chrono::seconds{120});
  r.events = json_lines(slurp(events));
  return r;
}

} // namespace tasksup::test
