#include "attempt_launch.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace fs = std::filesystem;

std::string cgroup_name_for(const std::string& task_id, int attempt) {
  std::string name;
  for (char c : task_id.substr(0, 200))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
              ? c
              : '_';
  if (name.empty())
    name = "task";
  return name + "-" + std::to_string(attempt);
}

std::string shim_dir_of(const std::string& dir) {
  std::error_code ec;
  auto p = fs::absolute(dir, ec);
  if (ec)
    p = dir;
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path())
    p = p.parent_path();
  return p.string();
}

std::string attempt_launcher::not_reported_text() const {
  return "tasksup-shim did not report the agent's start within " +
         std::to_string(options_.shim_report_timeout.count()) + " ms";
}

std::optional<shim_request>
attempt_launcher::launch(attempt& a, attempt_spec spec,
                         output_capture::line_callback sink) {
  a.started = clock_type::now();
  a.argv0 = spec.argv.empty() ? std::string{} : spec.argv.front();
  a.attempt_dir = spec.attempt_dir;
  auto fail = [&](std::string text) {
    a.never_ran(std::move(text));
    return std::optional<shim_request>{};
  };
  if (spec.argv.empty() || spec.argv.front().empty())
    return fail("attempt spec has no command (argv is empty)");
  if (spec.attempt_dir.empty())
    return fail("attempt spec has no attempt_dir");
  for (auto& [k, v] : spec.env)
    if (k.empty() || k.find('=') != std::string::npos ||
        k.find('\0') != std::string::npos || v.find('\0') != std::string::npos)
      return fail("attempt spec: invalid environment variable name '" + k +
                  "'");
  for (auto& arg : spec.argv)
    if (arg.find('\0') != std::string::npos)
      return fail("attempt spec: an argument contains a NUL byte");

  // Directories: the attempt's own, a fresh workspace and artifacts dir,
  // all private (the attempt's output and prompt end up in them).
  bool new_dir = ::mkdir(spec.attempt_dir.c_str(), private_dir_mode) == 0;
  if (!new_dir && errno == EEXIST) {
    ::chmod(spec.attempt_dir.c_str(), private_dir_mode);
  } else if (!new_dir) {
    if (auto err = make_private_dirs(spec.attempt_dir); !err.empty())
      return fail(err);
    new_dir = true;
  }
  auto dir = shim_dir_of(spec.attempt_dir);
  a.attempt_dir = dir;
  a.artifacts_dir = dir + "/artifacts";
  if (auto err = fresh_dir(a.artifacts_dir); !err.empty())
    return fail(err);
  auto cwd = spec.workdir;
  if (cwd.empty()) {
    cwd = dir + "/workspace";
    if (auto err = fresh_dir(cwd); !err.empty())
      return fail(err);
  }
  // The task's state directory: made on its first attempt, then kept as it
  // is (never cleared between attempts).
  std::string state_dir;
  if (!spec.state_dir.empty()) {
    state_dir = shim_dir_of(spec.state_dir);
    if (auto err = make_private_dirs(state_dir); !err.empty())
      return fail(err);
  }
  std::string feedback_path;
  if (!spec.feedback.empty()) {
    feedback_path = dir + "/" + std::string{feedback_file_name};
    if (auto err = write_file_atomically(feedback_path, spec.feedback);
        !err.empty())
      return fail("cannot write the feedback file: " + err);
  }
  // A record left by an earlier use of the directory must not be taken for
  // this attempt's.
  if (!new_dir)
    for (auto name : {exit_record_name, shim_record_name})
      ::unlink((dir + "/" + std::string{name}).c_str());

  // Lines go to the callback on the reactor thread; the shim writes the log.
  a.log_path = dir + "/output.log";
  auto cap =
    output_capture::create({}, std::move(sink), options_.output_limits);
  if (!cap)
    return fail(cap.error().to_string());
  a.capture.emplace(std::move(*cap));

  // Memory limit: a cgroup the agent joins before exec (the shim stays out
  // of it, so an OOM kill never takes the shim).
  if (spec.memory_limit_mb && *spec.memory_limit_mb > 0) {
    if (auto* ctrl = reaper_.memory_controller()) {
      auto cg = detail::memory_cgroup::create(
        *ctrl, cgroup_name_for(spec.task_id, spec.attempt),
        *spec.memory_limit_mb * 1024 * 1024);
      if (cg) {
        a.cgroup.emplace(std::move(*cg));
        a.cgroup->close_procs_fd();
      } else {
        warn_("process runtime: task " + spec.task_id + " attempt " +
              std::to_string(spec.attempt) +
              " runs without its memory limit: " + cg.error().to_string());
      }
    }
  }

  // Environment: the inherited minimum, the spec's, then ours. The shim
  // runs with it and passes it on unchanged.
  auto env = program_.base_env();
  for (auto& [k, v] : spec.env)
    env[k] = v;
  add_trace_env(spec.trace_id, spec.span_id, env);
  env["TASKSUP_TASK_ID"] = spec.task_id;
  env["TASKSUP_ATTEMPT"] = std::to_string(spec.attempt);
  env["TASKSUP_ARTIFACTS_DIR"] = a.artifacts_dir;
  env["TASKSUP_DONE_FILE"] =
    a.artifacts_dir + '/' + std::string{done_file_name};
  if (!spec.config_dir.empty())
    env["TASKSUP_AGENT_CONFIG_DIR"] = spec.config_dir;
  if (!feedback_path.empty())
    env["TASKSUP_FEEDBACK"] = std::move(feedback_path);
  if (!state_dir.empty())
    env["TASKSUP_MEMBER_STATE"] = std::move(state_dir);

  if (options_.shim_idle_timeout.count() > 0 && dir.rfind('/') > 0) {
    shim_request req;
    req.attempt_dir = dir;
    req.log_bytes = options_.output_limits.log_bytes;
    req.drain_ms = static_cast<std::uint64_t>(
      std::max<long long>(0, options_.drain_timeout.count()));
    req.group_ms = static_cast<std::uint64_t>(
      std::max<long long>(0, options_.group_exit_timeout.count()));
    if (a.cgroup)
      req.cgroup = a.cgroup->path();
    std::error_code ec;
    auto abs_cwd = fs::absolute(cwd, ec);
    req.cwd = ec ? cwd : abs_cwd.string();
    req.argv = std::move(spec.argv);
    req.env.reserve(env.size());
    for (auto& [k, v] : env)
      req.env.push_back(k + "=" + v);
    return req;
  }

  std::vector<std::string> args = {
    program_.path(),
    "--attempt-dir",
    dir,
    "--log-bytes",
    std::to_string(options_.output_limits.log_bytes),
    "--drain-ms",
    std::to_string(std::max<long long>(0, options_.drain_timeout.count())),
    "--group-ms",
    std::to_string(std::max<long long>(0, options_.group_exit_timeout.count())),
    "--orphan",
    options_.orphans == orphan_policy::kill ? "kill" : "keep",
  };
  if (a.cgroup) {
    args.emplace_back("--cgroup");
    args.push_back(a.cgroup->path());
  }
  args.emplace_back("--");
  for (auto& arg : spec.argv)
    args.push_back(arg);

  child_plan plan;
  set_command(plan, args, env);
  plan.cwd = cwd;
  plan.stdin_fd = program_.devnull();
  plan.max_fd = program_.max_fd();

  // One pipe per stream, so each line keeps the stream it came from; one
  // for the shim's report; with orphan_policy::kill, one whose hang-up tells
  // the shim that we are gone.
  auto close_all = [&] {
    for (auto* fd : {&plan.output_fd, &plan.error_fd, &plan.extra_fd,
                     &a.output_fd, &a.error_fd, &a.control_fd})
      close_fd(*fd);
    if (plan.stdin_fd != program_.devnull())
      close_fd(plan.stdin_fd);
  };
  int report_fd = -1;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return fail("cannot create the output pipe: " + errno_text(errno));
  a.output_fd = p[0];
  plan.output_fd = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    auto err = errno;
    close_all();
    return fail("cannot create the error pipe: " + errno_text(err));
  }
  a.error_fd = p[0];
  plan.error_fd = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    auto err = errno;
    close_all();
    return fail("cannot create the shim's pipe: " + errno_text(err));
  }
  report_fd = p[0];
  plan.extra_fd = p[1];
  if (options_.orphans == orphan_policy::kill) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      auto err = errno;
      close_all();
      close_fd(report_fd);
      return fail("cannot create the shim's pipe: " + errno_text(err));
    }
    plan.stdin_fd = p[0];
    a.control_fd = p[1];
  }
  if (!raise_fd(plan.output_fd) || !raise_fd(plan.error_fd) ||
      !raise_fd(plan.extra_fd) || !raise_fd(plan.stdin_fd) ||
      ::fcntl(a.output_fd, F_SETFL, O_NONBLOCK) != 0 ||
      ::fcntl(a.error_fd, F_SETFL, O_NONBLOCK) != 0) {
    auto err = errno;
    close_all();
    close_fd(report_fd);
    return fail("cannot prepare descriptors: " + errno_text(err));
  }
  sigemptyset(&plan.mask);
  child_stack stack{program_.stacks()};
  if (stack.top() == nullptr) {
    auto err = errno;
    close_all();
    close_fd(report_fd);
    return fail("cannot map a stack for the child: " + errno_text(err));
  }

  a.started = clock_type::now();
  auto spawned = spawn_child(plan, stack.top());
  auto pid = spawned.pid;
  int pidfd = spawned.pidfd;
  auto spawn_err = spawned.err;
  // The shim has exec'd or exited by now (CLONE_VFORK).
  close_fd(plan.output_fd);
  close_fd(plan.error_fd);
  close_fd(plan.extra_fd);
  if (plan.stdin_fd != program_.devnull())
    close_fd(plan.stdin_fd);
  auto give_up = [&](std::string text) {
    close_fd(report_fd);
    close_fd(a.output_fd);
    close_fd(a.error_fd);
    close_fd(a.control_fd);
    return fail(std::move(text));
  };
  if (pid < 0)
    return give_up("cannot start a process: clone failed: " +
                   errno_text(spawn_err));
  if (plan.failed_stage != 0) {
    // The shim could not exec and has exited; reap it here.
    close_fd(pidfd);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (plan.failed_stage == stage_exec)
      return give_up("cannot start tasksup-shim (" + program_.path() +
                     "): " + errno_text(plan.failed_err));
    return give_up("cannot start " + a.argv0 + ": " +
                   stage_text(plan.failed_stage) + ": " +
                   errno_text(plan.failed_err));
  }
  if (pidfd < 0) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return give_up("cannot watch process " + std::to_string(pid) +
                   ": no pidfd");
  }
  // The shim answers once the agent has exec'd (or could not).
  auto agent = read_shim_report(report_fd, options_.shim_report_timeout);
  close_fd(report_fd);
  if (agent == -2) {
    close_fd(a.control_fd);
    stop_unreported_shim(pid, pidfd, a.attempt_dir);
    close_fd(pidfd);
    return give_up(not_reported_text());
  }
  a.pid = pid;
  a.pidfd = pidfd; // close-on-exec already (CLONE_PIDFD)
  a.agent_pid = agent;
  return std::optional<shim_request>{};
}

} // namespace tasksup::runtime::detail
