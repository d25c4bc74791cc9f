// A task supervisor's hooks: the repository worktree each attempt starts
// from, the preflight before it, the gates after it, the feedback the next
// attempt is given, and the delivery of the change. Git and commands block,
// so they run on the task's workspace thread, one job after the other,
// never on the scheduler; each job's reply comes back to the supervisor.

#include "supervisor_state.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/spawn_options.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::detail {

namespace {

/// The task's workspace thread: git, gates, preflight and delivery block,
/// so they run here, one job after the other, never on the scheduler.
workspace_actor::behavior_type
workspace_thread(workspace_actor::pointer self,
                 std::shared_ptr<workspace_calls> jobs) {
  // Jobs not run hold what holds this thread: let them go with it.
  self->attach_functor([jobs] { jobs->clear(); });
  return {[=](ws_job_atom, std::uint64_t id) {
    if (auto job = jobs->take(id); job && !job())
      self->quit();
  }};
}

/// Where a job's reply goes: the supervisor, and its table of replies.
struct reply_to {
  supervisor_impl sup;
  std::shared_ptr<workspace_calls> replies;
};

reply_to replies_of(supervisor_actor self) {
  return {caf::actor_cast<supervisor_impl>(self), self->state.run->replies};
}

bool in_container(const supervisor_state& s) {
  return s.node->runtime && s.node->runtime->name() == "docker";
}

/// Runs `job` on the task's workspace thread (spawned on first use).
void ws_submit(supervisor_actor self, workspace_fn job) {
  auto& run = *self->state.run;
  if (!run.ws)
    run.ws = self->system().spawn<caf::detached>(workspace_thread, run.jobs);
  self->send(run.ws, ws_job_atom::value, run.jobs->add(std::move(job)));
}

/// From a job: runs `reply` on the supervisor (dropped if it is gone).
void ws_reply(const reply_to& to, workspace_fn reply) {
  caf::anon_send(to.sup, ws_done_atom::value,
                 to.replies->add(std::move(reply)));
}

/// What a gate or the preflight learns about its attempt.
std::map<std::string, std::string> hook_env(const supervisor_state& s,
                                            int attempt) {
  std::map<std::string, std::string> env;
  env["TASKSUP_TASK_ID"] = s.task_id();
  env["TASKSUP_ATTEMPT"] = std::to_string(attempt);
  runtime::add_trace_env(s.opts->trace_id, std::string_view{s.span}, env);
  if (s.run && !s.run->worktree.empty())
    env["TASKSUP_WORKTREE"] = s.run->worktree;
  return env;
}

std::string joined(const std::vector<std::string>& lines, std::size_t max) {
  std::string out;
  auto from = lines.size() > max ? lines.size() - max : 0;
  for (auto i = from; i < lines.size(); ++i) {
    out += lines[i];
    out += '\n';
  }
  return out;
}

/// Lets the current attempt's worktree go: removed, or kept for inspection
/// when it failed and the task says `keep_failed`. `last`: the task ends
/// (its workspace thread ends after this job).
void drop_worktree(supervisor_actor self, bool last, bool failed) {
  auto& s = self->state;
  auto& run = *s.run;
  auto dir = std::exchange(run.worktree, {});
  auto keep = !dir.empty() && s.opts->hooks->keep_failed && failed;
  if (keep)
    emit(self, step_event(s.head(), "worktree", "", true, std::nullopt,
                          "failed attempt's worktree kept at " + dir));
  if (dir.empty() || keep) {
    if (last && run.ws)
      ws_submit(self, [ws = run.ws]() mutable {
        ws = nullptr;
        return false;
      });
    return;
  }
  auto repo = run.repo;
  // The last job holds the thread's handle until it ran.
  auto ws_hold = last ? run.ws : workspace_actor{};
  ws_submit(self, [repo, dir, last, ws_hold]() mutable {
    repo->remove(dir);
    ws_hold = nullptr;
    return !last;
  });
}

/// The worktree of attempt `attempt` is ready (or could not be made).
void worktree_ready(supervisor_actor self, runtime::attempt_spec spec,
                    std::size_t agent_index, int attempt,
                    const std::string& commit, const std::string& err) {
  auto& s = self->state;
  if (!commit.empty())
    s.run->base_commit = commit;
  if (s.m.phase != task_phase::running || s.m.attempt != attempt || s.worker)
    return;
  attempt_outcome out;
  out.exit_code = -1;
  out.started = false;
  if (!err.empty()) {
    emit(self, step_event(s.head(), "worktree", "", false, std::nullopt, err));
    out.infrastructure_error = "cannot prepare the worktree: " + err;
    attempt_ended(self, attempt, std::move(out));
    return;
  }
  // Stopped (user, deadline, timeout, fallback) while it was made.
  if (s.m.stop != stop_request::none || s.m.timed_out || s.m.deadline_passed ||
      s.m.fallback_requested) {
    out.infrastructure_error = "stopped before the agent started";
    attempt_ended(self, attempt, std::move(out));
    return;
  }
  spawn_worker(self, std::move(spec), agent_index);
}

/// One command's result as a `step` event.
void emit_step(supervisor_actor self, std::string_view step,
               const std::string& name, const runtime::command_result& r) {
  std::string msg;
  if (!r.error.empty())
    msg = r.error;
  else if (r.timed_out)
    msg = "timed out";
  else if (r.cancelled)
    msg = "cancelled";
  else
    msg = (r.passed() ? "passed" : "failed") +
          (r.last_line().empty() ? std::string{} : ": " + r.last_line());
  emit(self, step_event(self->state.head(), step, name, r.passed(),
                        r.error.empty() ? std::optional<int>{r.exit_code}
                                        : std::nullopt,
                        msg));
}

} // namespace

void prepare_attempt(supervisor_actor self, runtime::attempt_spec spec,
                     std::size_t agent_index, int attempt) {
  auto& s = self->state;
  auto& run = *s.run;
  const auto& h = *s.opts->hooks;
  if (!run.worktree.empty())
    drop_worktree(self, false, run.failed);
  run.attempt_dir = spec.attempt_dir;
  run.failed = false;
  auto docker = in_container(s);
  if (h.feedback.enabled && run.failed_attempt > 0) {
    auto output = joined(run.lines, static_cast<std::size_t>(h.feedback.lines));
    // The runtime that runs the attempt writes it where the agent finds it
    // (TASKSUP_FEEDBACK), on whichever node that is.
    spec.feedback = "attempt: " + std::to_string(run.failed_attempt) +
                    "\nreason: " + run.reason + "\n\n" + output;
    auto prompt =
      runtime::feedback_prompt(s.opts->task.prompt, h.feedback.template_text,
                               run.failed_attempt, run.reason, output);
    if (s.agent(agent_index).prompt_as_argument && !spec.argv.empty())
      spec.argv.back() = std::move(prompt);
    else
      spec.env["TASKSUP_PROMPT"] = std::move(prompt);
  }
  if (!run.repo) {
    spawn_worker(self, std::move(spec), agent_index);
    return;
  }
  run.worktree = spec.attempt_dir + "/workspace";
  // A container sees the worktree at its workspace mount.
  if (!docker)
    spec.workdir = run.worktree;
  spec.env["TASKSUP_WORKTREE"] = docker ? "/workspace" : run.worktree;
  auto sup = replies_of(self);
  auto* me = self;
  ws_submit(self, [sup, me, repo = run.repo, base = run.base_commit,
                   dir = run.worktree, spec = std::move(spec), agent_index,
                   attempt]() mutable {
    auto commit = base;
    std::string err;
    if (commit.empty()) {
      if (auto r = repo->resolve_base())
        commit = *r;
      else
        err = r.error().to_string();
    }
    if (err.empty())
      if (auto added = repo->add(dir, commit); !added)
        err = added.error().to_string();
    ws_reply(sup, [me, spec = std::move(spec), agent_index, attempt, commit,
                   err]() mutable {
      worktree_ready(me, std::move(spec), agent_index, attempt, commit, err);
      return true;
    });
    return true;
  });
}

void run_preflight(supervisor_actor self, int attempt) {
  auto& s = self->state;
  s.span = s.ids->span_id();
  s.span_attempt = attempt;
  const auto& cmd = *s.opts->hooks->preflight;
  runtime::command_options o;
  o.argv = cmd.argv;
  o.timeout_s = cmd.timeout_s;
  if (s.opts->hooks->repo)
    o.cwd = s.opts->hooks->repo->path;
  o.env = hook_env(s, attempt);
  // The attempt has no worktree yet.
  o.env.erase("TASKSUP_WORKTREE");
  o.tail_lines =
    static_cast<std::size_t>(std::max(s.opts->hooks->feedback.lines, 1));
  auto cancel = s.run->cancel;
  auto sup = replies_of(self);
  auto* me = self;
  ws_submit(self, [sup, me, o, cancel, attempt, name = cmd.name]() mutable {
    o.cancel = cancel.get();
    auto r = runtime::run_command(o);
    ws_reply(sup, [me, r, attempt, name] {
      emit_step(me, "preflight", name, r);
      me->state.run->step_tail = r.tail;
      drive(me, input::preflight_done{attempt, r.passed(), r.exit_code,
                                      r.timed_out, r.last_line()});
      return true;
    });
    return true;
  });
}

void run_gates(supervisor_actor self, int attempt) {
  auto& s = self->state;
  auto& run = *s.run;
  const auto& h = *s.opts->hooks;
  auto env = hook_env(s, attempt);
  auto sup = replies_of(self);
  auto* me = self;
  auto lines = static_cast<std::size_t>(std::max(h.feedback.lines, 1));
  ws_submit(self, [sup, me, attempt, env, lines, gates = h.gates,
                   repo = run.repo, dir = run.worktree,
                   commit = run.base_commit, adir = run.attempt_dir,
                   cancel = run.cancel]() mutable {
    // The change is taken before the gates run, so whatever they build
    // (caches, outputs) is not part of it.
    std::string capture_err;
    bool empty = true;
    if (repo) {
      auto c = repo->capture_change(dir, commit, adir + "/change.patch");
      if (c)
        empty = c->empty;
      else
        capture_err = c.error().to_string();
    }
    std::vector<std::pair<std::string, runtime::command_result>> results;
    for (auto& g : gates) {
      if (!capture_err.empty())
        break;
      runtime::command_options o;
      o.argv = g.argv;
      o.cwd = dir;
      o.env = env;
      o.timeout_s = g.timeout_s;
      o.tail_lines = lines;
      o.log_path = adir + "/gates.log";
      o.cancel = cancel.get();
      results.emplace_back(g.name, runtime::run_command(o));
      if (!results.back().second.passed())
        break;
    }
    ws_reply(sup, [me, attempt, results, capture_err, empty] {
      auto& st = me->state;
      if (!capture_err.empty()) {
        emit(me, step_event(st.head(), "gate", "git", false, std::nullopt,
                            capture_err));
        st.run->step_tail = {capture_err};
        drive(me,
              input::gates_done{attempt, false, "git", -1, false, capture_err});
        return true;
      }
      st.run->captured = attempt;
      st.run->change_empty = empty;
      for (auto& [name, r] : results)
        emit_step(me, "gate", name, r);
      input::gates_done in;
      in.attempt = attempt;
      in.passed = true;
      if (!results.empty() && !results.back().second.passed()) {
        const auto& [name, r] = results.back();
        in.passed = false;
        in.gate = name;
        in.exit_code = r.exit_code;
        in.timed_out = r.timed_out;
        in.detail = r.last_line();
        st.run->step_tail = r.tail;
      }
      drive(me, std::move(in));
      return true;
    });
    return true;
  });
}

void deliver_change(supervisor_actor self, int attempt) {
  auto& s = self->state;
  auto& run = *s.run;
  const auto& h = *s.opts->hooks;
  auto sup = replies_of(self);
  auto* me = self;
  std::string message = "tasksup: task " + s.task_id() + ", agent " +
                        s.agent().agent_id + ", attempt " +
                        std::to_string(attempt);
  auto first = s.opts->task.prompt.substr(
    0, std::min(s.opts->task.prompt.find('\n'), std::size_t{200}));
  message += "\n\n" + first + "\n";
  ws_submit(self, [sup, me, attempt, message, mode = h.deliver, repo = run.repo,
                   dir = run.worktree, commit = run.base_commit,
                   adir = run.attempt_dir, captured = run.captured == attempt,
                   empty = run.change_empty]() mutable {
    auto patch = adir + "/change.patch";
    std::string err;
    std::string detail;
    if (!captured) {
      if (auto c = repo->capture_change(dir, commit, patch))
        empty = c->empty;
      else
        err = c.error().to_string();
    }
    if (err.empty() && empty) {
      detail = "the attempt changed nothing; nothing to deliver";
    } else if (err.empty()) {
      switch (mode) {
        case delivery_mode::patch:
          detail = "patch at " + patch;
          break;
        case delivery_mode::apply:
          if (auto a = repo->apply(patch); !a)
            err = a.error().what;
          else
            detail = "applied to " + repo->repo().path;
          break;
        case delivery_mode::branch:
          if (auto c = repo->commit_to_branch(dir, repo->branch(), message); !c)
            err = c.error().what;
          else
            detail = "committed " + *c + " on " + repo->branch();
          break;
      }
    }
    ws_reply(sup, [me, attempt, mode, err, detail] {
      auto ok = err.empty();
      emit(me, step_event(me->state.head(), "deliver", to_string(mode), ok,
                          std::nullopt, ok ? detail : err));
      drive(me, input::delivered{attempt, ok, err});
      return true;
    });
    return true;
  });
}

void remember_failure(supervisor_actor self, const classification& c) {
  auto& s = self->state;
  auto& run = *s.run;
  run.failed = true;
  run.failed_attempt = s.m.attempt;
  run.reason = std::string{to_string(c.cls)} + " (rule " + c.rule + ")";
  if (!c.line.empty())
    run.reason += ": " + c.line;
  // A gate's, a preflight's or the answer check's own lines say more than
  // the attempt's.
  auto own = c.cls == error_class::gate_failed ||
             c.cls == error_class::preflight_failed ||
             c.cls == error_class::invalid_output;
  run.lines = own ? run.step_tail : run.attempt_tail;
}

void end_hooks(supervisor_actor self, bool failed,
               std::vector<std::string>& artifacts) {
  auto& run = *self->state.run;
  // The change is always an artifact.
  auto patch = run.attempt_dir + "/change.patch";
  std::error_code ec;
  if (!run.attempt_dir.empty() && std::filesystem::exists(patch, ec))
    artifacts.push_back(patch);
  run.cancel->store(true);
  drop_worktree(self, true, failed || run.failed);
}

} // namespace tasksup::detail
