#include "tasksup/runtime/workspace.hpp"

#include "tasksup/runtime/docker_runtime.hpp"
#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

extern char** environ;

namespace tasksup::runtime {

namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

/// Longest output line kept in a tail.
constexpr std::size_t max_line_bytes = 4096;

/// Grace between SIGTERM and SIGKILL of a command that timed out.
constexpr auto kill_grace = std::chrono::seconds{2};

error fail(std::string where, std::string what) {
  return error{std::move(where), {}, std::move(what)};
}

/// Closes a descriptor once.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Collects output into lines, keeping the last `max` of them.
class line_tail {
public:
  explicit line_tail(std::size_t max) : max_(max) {}

  void feed(const char* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (data[i] == '\n') {
        push();
        continue;
      }
      if (cur_.size() < max_line_bytes)
        cur_ += data[i];
    }
  }

  std::vector<std::string> finish() {
    if (!cur_.empty())
      push();
    return {lines_.begin(), lines_.end()};
  }

private:
  void push() {
    if (!cur_.empty() && cur_.back() == '\r')
      cur_.pop_back();
    lines_.push_back(std::move(cur_));
    cur_.clear();
    while (lines_.size() > max_)
      lines_.pop_front();
  }

  std::size_t max_;
  std::string cur_;
  std::deque<std::string> lines_;
};

/// One mutex per repository path: git's own lock files make concurrent
/// writers fail instead of wait, so this process's tasks take turns.
std::mutex& repo_mutex(const std::string& path) {
  static std::mutex guard;
  static std::map<std::string, std::unique_ptr<std::mutex>> all;
  std::lock_guard<std::mutex> lock{guard};
  auto& m = all[path];
  if (!m)
    m = std::make_unique<std::mutex>();
  return *m;
}

/// The environment of a child: this process's, with `extra` on top.
std::vector<std::string>
child_env(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry{*e};
    auto eq = entry.find('=');
    if (eq != std::string_view::npos &&
        extra.count(std::string{entry.substr(0, eq)}) > 0)
      continue;
    out.emplace_back(entry);
  }
  for (auto& [key, value] : extra)
    out.push_back(key + "=" + value);
  return out;
}

int exit_code_of(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return -1;
}

/// Replaces every `{name}` in `text` by `value`.
void replace_all(std::string& text, std::string_view name,
                 const std::string& value) {
  std::size_t at = 0;
  while ((at = text.find(name, at)) != std::string::npos) {
    text.replace(at, name.size(), value);
    at += value.size();
  }
}

/// The error of a git command that failed.
error git_error(std::string_view what, const command_result& r) {
  std::string text{what};
  text += ": ";
  if (!r.error.empty())
    text += r.error;
  else if (r.timed_out)
    text += "git timed out";
  else
    text += r.last_line().empty() ? "git exited " + std::to_string(r.exit_code)
                                  : r.last_line();
  return fail("git", std::move(text));
}

/// True when `name` is an executable file, or found as one in PATH.
bool resolves(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat sb {};
    return ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  // A relative path with a slash names a file in the command's working
  // directory (a worktree that does not exist yet): not checked here.
  if (name.find('/') != std::string::npos)
    return name.front() != '/' || executable(name);
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (true) {
    auto colon = dirs.find(':');
    auto dir = dirs.substr(0, colon);
    if (executable((dir.empty() ? std::string{"."} : std::string{dir}) + "/" +
                   name))
      return true;
    if (colon == std::string_view::npos)
      return false;
    dirs.remove_prefix(colon + 1);
  }
}

} // namespace

std::string command_result::last_line() const {
  if (!error.empty())
    return error;
  for (auto i = tail.rbegin(); i != tail.rend(); ++i)
    if (!i->empty())
      return *i;
  return {};
}

command_result run_command(const command_options& opts) {
  command_result out;
  if (opts.argv.empty() || opts.argv[0].empty()) {
    out.error = "no command";
    return out;
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    out.error = std::string{"pipe: "} + std::strerror(errno);
    return out;
  }
  fd_guard read_end{pipe_fds[0]};
  fd_guard write_end{pipe_fds[1]};
  fd_guard out_file;
  if (!opts.stdout_path.empty()) {
    out_file.fd =
      ::open(opts.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
             private_file_mode);
    if (out_file.fd < 0) {
      out.error =
        "cannot write " + opts.stdout_path + ": " + std::strerror(errno);
      return out;
    }
  }
  fd_guard log_file;
  if (!opts.log_path.empty())
    log_file.fd =
      ::open(opts.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
             private_file_mode);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(
    &actions, out_file.fd >= 0 ? out_file.fd : write_end.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.fd, 2);
  if (!opts.cwd.empty())
    posix_spawn_file_actions_addchdir_np(&actions, opts.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout stops everything it started.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                    POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGPIPE, SIGHUP, SIGQUIT, SIGCHLD})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  std::vector<char*> argv;
  for (auto& a : opts.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  auto env = child_env(opts.env);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc =
    ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    out.error = "cannot run " + opts.argv[0] + ": " + std::strerror(rc);
    return out;
  }
  ::close(write_end.fd);
  write_end.fd = -1;
  line_tail tail{opts.tail_lines};
  auto start = clock::now();
  auto deadline = opts.timeout_s > 0
                    ? start + std::chrono::duration_cast<clock::duration>(
                                std::chrono::duration<double>(opts.timeout_s))
                    : clock::time_point::max();
  auto kill_at = clock::time_point::max();
  bool open = true;
  int status = 0;
  bool reaped = false;
  char buf[8192];
  while (!reaped) {
    auto now = clock::now();
    if (opts.cancel != nullptr && opts.cancel->load() && !out.cancelled) {
      out.cancelled = true;
      ::kill(-pid, SIGKILL);
    }
    if (!out.timed_out && now >= deadline) {
      out.timed_out = true;
      ::kill(-pid, SIGTERM);
      kill_at = now + kill_grace;
    }
    if (now >= kill_at) {
      ::kill(-pid, SIGKILL);
      kill_at = clock::time_point::max();
    }
    if (open) {
      pollfd p{read_end.fd, POLLIN, 0};
      // Short waits: the timeout and the cancel flag are checked between.
      auto n = ::poll(&p, 1, 100);
      if (n > 0) {
        auto got = ::read(read_end.fd, buf, sizeof(buf));
        if (got > 0) {
          tail.feed(buf, static_cast<std::size_t>(got));
          if (log_file.fd >= 0 &&
              ::write(log_file.fd, buf, static_cast<std::size_t>(got)) < 0) {
            // The log is a convenience; the tail still has the output.
          }
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          open = false;
        }
      }
    } else {
      ::usleep(20000);
    }
    auto w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      // Drain what the pipe still holds (the group may keep it open: then
      // stop at once rather than wait for a grandchild).
      while (open) {
        pollfd p{read_end.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0)
          break;
        auto got = ::read(read_end.fd, buf, sizeof(buf));
        if (got <= 0)
          break;
        tail.feed(buf, static_cast<std::size_t>(got));
        if (log_file.fd >= 0 &&
            ::write(log_file.fd, buf, static_cast<std::size_t>(got)) < 0) {
        }
      }
      reaped = true;
    }
  }
  // Whatever it left running in its group goes with it.
  ::kill(-pid, SIGKILL);
  out.exit_code = exit_code_of(status);
  out.tail = tail.finish();
  return out;
}

repo_workspace::repo_workspace(repo_spec repo, std::string task_id)
  : repo_(std::move(repo)), task_id_(std::move(task_id)) {}

command_result repo_workspace::git(std::vector<std::string> args,
                                   std::string cwd,
                                   std::string stdout_path) const {
  command_options opts;
  opts.argv.reserve(args.size() + 3);
  opts.argv.push_back("git");
  opts.argv.push_back("-C");
  opts.argv.push_back(cwd.empty() ? repo_.path : cwd);
  for (auto& a : args)
    opts.argv.push_back(std::move(a));
  // No pager, no prompt for credentials, no editor, no user hooks' terminal.
  opts.env["GIT_TERMINAL_PROMPT"] = "0";
  opts.env["GIT_PAGER"] = "cat";
  opts.env["GIT_EDITOR"] = "true";
  opts.timeout_s = 300;
  opts.tail_lines = 20;
  opts.stdout_path = std::move(stdout_path);
  return run_command(opts);
}

expected<std::string> repo_workspace::resolve_base() const {
  auto r = git({"rev-parse", "--verify", "--quiet", "--end-of-options",
                repo_.base + "^{commit}"});
  if (!r.passed() || r.tail.empty())
    return fail("repo",
                "base \"" + repo_.base + "\" is not a commit in " + repo_.path);
  return r.tail.back();
}

expected<bool> repo_workspace::add(const std::string& dir,
                                   const std::string& commit) const {
  if (auto err = make_private_dirs(fs::path{dir}.parent_path().string());
      !err.empty())
    return fail("workspace", err);
  std::lock_guard<std::mutex> lock{repo_mutex(repo_.path)};
  auto r = git({"worktree", "add", "--detach", "--lock", "--reason",
                "tasksup task " + task_id_, dir, commit});
  if (!r.passed())
    return git_error("git worktree add " + dir, r);
  // git makes the worktree with the umask's mode; the task's code and what
  // it writes there are the node user's only, like the rest of the attempt.
  ::chmod(dir.c_str(), private_dir_mode);
  return true;
}

expected<bool> repo_workspace::remove(const std::string& dir) const {
  std::lock_guard<std::mutex> lock{repo_mutex(repo_.path)};
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    // Twice forced: locked, and possibly with changes.
    auto r = git({"worktree", "remove", "--force", "--force", dir});
    if (!r.passed()) {
      fs::remove_all(dir, ec);
      git({"worktree", "prune"});
      if (ec)
        return git_error("git worktree remove " + dir, r);
    }
  } else {
    git({"worktree", "prune"});
  }
  return true;
}

expected<change>
repo_workspace::capture_change(const std::string& dir,
                               const std::string& commit,
                               const std::string& patch_path) const {
  auto added = git({"add", "--all", "--", "."}, dir);
  if (!added.passed())
    return git_error("git add", added);
  auto diff = git({"diff", "--cached", "--binary", "--no-color",
                   "--no-ext-diff", commit, "--"},
                  dir, patch_path);
  if (!diff.passed())
    return git_error("git diff", diff);
  auto names =
    git({"diff", "--cached", "--name-only", "--no-color", commit, "--"}, dir);
  change out;
  for (auto& line : names.tail)
    if (!line.empty())
      out.files.push_back(line);
  std::error_code ec;
  out.empty = fs::file_size(patch_path, ec) == 0 || ec;
  return out;
}

expected<std::string>
repo_workspace::commit_to_branch(const std::string& dir,
                                 const std::string& branch,
                                 const std::string& message) const {
  std::vector<std::string> args;
  // A repository without an identity still gets a commit.
  auto who = git({"config", "user.email"}, dir);
  if (!who.passed())
    args = {"-c", "user.name=tasksup", "-c", "user.email=tasksup@localhost"};
  for (auto a : {"commit", "--quiet", "--no-verify", "--allow-empty", "-m"})
    args.emplace_back(a);
  args.push_back(message);
  auto committed = git(args, dir);
  if (!committed.passed())
    return git_error("git commit", committed);
  auto head = git({"rev-parse", "--verify", "HEAD"}, dir);
  if (!head.passed() || head.tail.empty())
    return git_error("git rev-parse HEAD", head);
  auto sha = head.tail.back();
  std::lock_guard<std::mutex> lock{repo_mutex(repo_.path)};
  // `git branch` refuses a branch that exists: an earlier task's is never
  // overwritten.
  auto made = git({"branch", "--no-track", "--", branch, sha});
  if (!made.passed())
    return fail("deliver", "cannot create branch " + branch + " in " +
                             repo_.path + ": " + made.last_line());
  return sha;
}

expected<bool> repo_workspace::remove_branch() const {
  auto ref = "refs/heads/" + branch();
  std::lock_guard<std::mutex> lock{repo_mutex(repo_.path)};
  if (!git({"rev-parse", "--verify", "--quiet", ref}).passed())
    return false;
  auto removed = git({"branch", "-D", "--", branch()});
  if (!removed.passed())
    return fail("deliver", "cannot delete branch " + branch() + " in " +
                             repo_.path + ": " + removed.last_line());
  return true;
}

expected<bool> repo_workspace::apply(const std::string& patch_path) const {
  std::lock_guard<std::mutex> lock{repo_mutex(repo_.path)};
  auto check = git({"apply", "--check", "--binary", patch_path});
  if (!check.passed())
    return fail("deliver", "the change does not apply to " + repo_.path + " (" +
                             check.last_line() + "); the patch is kept at " +
                             patch_path);
  auto applied = git({"apply", "--binary", patch_path});
  if (!applied.passed())
    return fail("deliver", "applying the change to " + repo_.path +
                             " failed (" + applied.last_line() +
                             "); the patch is kept at " + patch_path);
  return true;
}

expected<bool> admit_task(const task_spec& task, const std::string& runtime,
                          const std::vector<std::string>& allowed_paths) {
  // The runtime chosen at run time (`run --runtime docker`) has no image to
  // fall back on either: refuse before any attempt fails for it.
  if (runtime == "docker" && task.image.empty())
    return error{"admit", "/image",
                 "the docker runtime needs the task's \"image\" to run its "
                 "attempts in"};
  // Paths are compared after resolving `..` and symlinks, so neither leads
  // out of an allowed directory.
  auto allowed = [&](const std::string& p) {
    if (allowed_paths.empty())
      return true;
    std::error_code ec;
    auto real = fs::weakly_canonical(p, ec);
    if (ec)
      return false;
    for (auto& root : allowed_paths) {
      auto base = fs::weakly_canonical(root, ec);
      if (ec)
        continue;
      auto rel = real.lexically_relative(base);
      if (!rel.empty() && *rel.begin() != "..")
        return true;
    }
    return false;
  };
  if (task.repo && !allowed(task.repo->path))
    return error{"admit", "/repo/path",
                 "path check: " + task.repo->path +
                   " is outside the node's allowed_paths"};
  for (std::size_t i = 0; i < task.mounts.size(); ++i)
    if (!allowed(task.mounts[i].host_path))
      return error{"admit", "/mounts/" + std::to_string(i) + "/host_path",
                   "path check: " + task.mounts[i].host_path +
                     " is outside the node's allowed_paths"};
  if (task.repo) {
    std::error_code ec;
    if (!fs::is_directory(task.repo->path, ec))
      return error{"admit", "/repo/path",
                   "repository check: " + task.repo->path +
                     " is not a directory"};
    repo_workspace ws{*task.repo, task.id};
    auto inside = run_command([&] {
      command_options o;
      o.argv = {"git", "-C", task.repo->path, "rev-parse", "--git-dir"};
      o.timeout_s = 60;
      o.env["GIT_TERMINAL_PROMPT"] = "0";
      return o;
    }());
    if (!inside.passed())
      return error{"admit", "/repo/path",
                   "repository check: " + task.repo->path +
                     " is not a git repository (" + inside.last_line() + ")"};
    if (auto base = ws.resolve_base(); !base)
      return error{"admit", "/repo/base",
                   "repository check: " + base.error().what};
  }
  for (std::size_t i = 0; i < task.mounts.size(); ++i) {
    std::error_code ec;
    if (!fs::exists(task.mounts[i].host_path, ec))
      return error{"admit", "/mounts/" + std::to_string(i) + "/host_path",
                   "path check: " + task.mounts[i].host_path +
                     " does not exist"};
  }
  // Agents are checked for repository tasks and tasks with their own admit
  // command: elsewhere a missing CLI is still a runtime `agent_failure` that
  // falls back to the next agent. A relative path with a slash is resolved
  // by the runtime's working directory, so it is not checked here.
  auto check_agents = task.repo.has_value() || task.admit.has_value();
  if (check_agents && runtime != "docker" && task.selection) {
    for (std::size_t i = 0; i < task.selection->agents.size(); ++i) {
      const auto& a = task.selection->agents[i];
      if (a.agent_cli.find('/') != std::string::npos &&
          a.agent_cli.front() != '/')
        continue;
      if (!resolves(a.agent_cli))
        return error{"admit",
                     "/agent_selection/agents/" + std::to_string(i) +
                       "/agent_cli",
                     "agent check: " + a.agent_cli +
                       " is not an executable file nor found in PATH"};
    }
  }
  // The image must be on this host: tasksup never pulls.
  if (check_agents && runtime == "docker" && !task.image.empty()) {
    auto opts = docker_options_from_environment();
    auto present = opts ? docker_image_present(*opts, task.image)
                        : expected<bool>{opts.error()};
    if (!present)
      return error{"admit", "/image",
                   "image check: cannot ask the Docker engine about " +
                     task.image + ": " + present.error().to_string()};
    if (!*present)
      return error{"admit", "/image",
                   "image check: " + task.image +
                     " is not on this host (tasksup never pulls images)"};
  }
  for (auto* cmd : {task.preflight ? &*task.preflight : nullptr,
                    task.admit ? &*task.admit : nullptr}) {
    if (cmd != nullptr && !resolves(cmd->argv[0]))
      return error{"admit", cmd == &*task.admit ? "/admit" : "/preflight",
                   "command check: " + cmd->argv[0] +
                     " is not an executable file nor found in PATH"};
  }
  for (std::size_t i = 0; i < task.gates.size(); ++i)
    if (!resolves(task.gates[i].argv[0]))
      return error{"admit", "/gates/" + std::to_string(i),
                   "gate check: " + task.gates[i].argv[0] +
                     " is not an executable file nor found in PATH"};
  if (task.admit) {
    command_options o;
    o.argv = task.admit->argv;
    o.timeout_s = task.admit->timeout_s;
    o.cwd = task.repo ? task.repo->path : std::string{};
    o.env["TASKSUP_TASK_ID"] = task.id;
    auto r = run_command(o);
    if (!r.passed())
      return error{"admit", "/admit",
                   "admit command " + task.admit->name + " refused the task" +
                     (r.timed_out
                        ? std::string{" (timed out)"}
                        : " (exit " + std::to_string(r.exit_code) +
                            (r.last_line().empty() ? std::string{}
                                                   : ": " + r.last_line()) +
                            ")")};
  }
  return true;
}

std::string feedback_prompt(const std::string& prompt, const std::string& tmpl,
                            int failed_attempt, const std::string& reason,
                            const std::string& output) {
  std::string text =
    tmpl.empty() ? std::string{default_feedback_template} : tmpl;
  // The agent's output is untrusted: it is put in last, so nothing in it is
  // taken for a placeholder.
  replace_all(text, "{attempt}", std::to_string(failed_attempt));
  replace_all(text, "{reason}", reason);
  replace_all(text, "{output}", output);
  return prompt + text;
}

} // namespace tasksup::runtime
