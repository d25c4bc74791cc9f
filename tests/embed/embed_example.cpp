// An embedding application: its own actor spawns a tasksup task supervisor as
// a child, receives every event and the final escalation, and decides what to
// do with the result. No registry: the application is the parent.
//
// Then it starts a group of two tasks through the installed API, with a
// registry as the host of its tasks and its own actor as the group's
// parent: it learns that the group started, and how it ended (the
// escalation of a group to its parent).
//
// Usage: embed_example WORKDIR
// Runs an agent (/bin/sh) that fails once with a transient error and then
// succeeds; exits 0 when the result and the events say exactly that, and
// the group's member that fails once is restarted by its group, which then
// completes.

#include <tasksup/actors/group_supervisor_actor.hpp>
#include <tasksup/actors/protocol.hpp>
#include <tasksup/actors/registry_actor.hpp>
#include <tasksup/actors/task_supervisor_actor.hpp>

#include <tasksup/runtime/process_runtime.hpp>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

/// Runs a one_for_one group of two tasks with a registry as their host and
/// `self` as the group's parent; true when the group started, restarted its
/// member `once` after its first run failed, and completed.
bool run_group(caf::actor_system& sys, caf::scoped_actor& self,
               const std::string& workdir) {
  tasksup::registry_options reg;
  reg.config = tasksup::builtin_config();
  reg.runtimes["*"] = tasksup::runtime::make_process_runtime();
  reg.attempt_root = workdir + "/group";
  auto registry = tasksup::spawn_registry(sys, std::move(reg));
  auto member = [](const std::string& id, const std::string& script) {
    tasksup::task_spec t;
    t.id = id;
    t.prompt = "p";
    // One attempt per run: the group, not the task, restarts it.
    t.supervisor.max_retries_per_agent = 0;
    tasksup::agent_spec a;
    a.agent_id = "sh";
    a.agent_cli = "/bin/sh";
    a.args = {"-c", script};
    tasksup::agent_selection sel;
    sel.agents.push_back(a);
    t.selection = sel;
    tasksup::group_member_spec m;
    m.id = id;
    m.restart = tasksup::restart_type::transient;
    m.task = t;
    return m;
  };
  tasksup::group_spec spec;
  spec.id = "pair";
  spec.strategy = tasksup::group_strategy::one_for_one;
  // Its state directory remembers the first run.
  spec.members.push_back(member(
    "once", "f=\"$TASKSUP_MEMBER_STATE/ran\"; if [ -e \"$f\" ]; then exit 0; "
            "fi; touch \"$f\"; exit 1"));
  spec.members.push_back(member("fine", "exit 0"));
  tasksup::group_options opts;
  opts.spec = std::make_shared<const tasksup::group_spec>(spec);
  opts.host = caf::actor_cast<tasksup::group_host_actor>(registry);
  opts.parent = caf::actor_cast<tasksup::group_parent_actor>(self);
  tasksup::spawn_group(sys, opts);
  bool started = false;
  bool done = false;
  tasksup::group_report report;
  while (!done) {
    self->receive(
      [&](tasksup::group_started_atom, const std::string& id) {
        started = id == "pair";
      },
      [&](tasksup::group_ended_atom, const tasksup::group_report& r) {
        report = r;
        done = true;
      },
      caf::after(std::chrono::seconds(60)) >>
        [&] {
          std::cerr << "embed_example: the group did not end within 60 s\n";
          done = true;
        });
  }
  self->send_exit(registry, caf::exit_reason::user_shutdown);
  bool ok = started && report.group_id == "pair" &&
            report.reason == tasksup::group_end::completed &&
            report.as_member == tasksup::member_end::normal &&
            report.restarts == 1;
  std::cerr << "embed_example: group " << report.group_id << " ended "
            << tasksup::to_string(report.reason) << " after " << report.restarts
            << " restart(s): " << (ok ? "as expected" : "NOT as expected")
            << '\n';
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: embed_example WORKDIR\n";
    return 2;
  }
  caf::actor_system_config cfg;
  tasksup::register_protocol(cfg);
  caf::actor_system sys{cfg};

  tasksup::task_spec task;
  task.id = "embedded";
  task.prompt = "say hello";
  task.supervisor.backoff_base_seconds = 0.05;
  tasksup::agent_spec agent;
  agent.agent_id = "sh";
  agent.agent_cli = "/bin/sh";
  // The prompt is appended as the last argument, so it becomes $0 here.
  agent.args = {"-c", "if [ \"$TASKSUP_ATTEMPT\" = 1 ]; then echo 'connection "
                      "reset' >&2; exit 1; fi; echo hello"};
  tasksup::agent_selection selection;
  selection.agents.push_back(agent);
  task.selection = selection;

  tasksup::supervisor_options opts;
  opts.task = task;
  opts.default_agent = agent;
  opts.runtime = tasksup::runtime::make_process_runtime();
  opts.attempt_root = argv[1];

  caf::scoped_actor self{sys};
  // A scoped actor takes any message: its handle is given the interface a
  // supervisor's parent has (events, then the result).
  auto supervisor = tasksup::spawn_task_supervisor(
    sys, caf::actor_cast<tasksup::task_parent_actor>(self), opts);
  std::vector<std::string> kinds;
  bool done = false;
  tasksup::task_result result;
  while (!done) {
    self->receive(
      [&](tasksup::event_atom, const tasksup::event& ev) {
        kinds.emplace_back(tasksup::to_string(ev.kind));
        std::cout << ev.json() << '\n';
      },
      [&](tasksup::escalate_atom, const tasksup::task_result& res) {
        result = res;
        done = true;
      },
      caf::after(std::chrono::seconds(60)) >>
        [&] {
          std::cerr << "embed_example: no result within 60 s\n";
          done = true;
        });
  }
  auto count = [&](const char* kind) {
    long n = 0;
    for (auto& k : kinds)
      n += k == kind ? 1 : 0;
    return n;
  };
  bool ok = result.outcome == tasksup::task_outcome::succeeded &&
            result.exit_code == 0 && result.metadata.total_attempts == 2 &&
            count("attempt_started") == 2 && count("retry_scheduled") == 1 &&
            count("task_done") == 1;
  std::cerr << "embed_example: outcome " << tasksup::to_string(result.outcome)
            << ", attempts " << result.metadata.total_attempts << ": "
            << (ok ? "as expected" : "NOT as expected") << '\n';
  auto group_ok = run_group(sys, self, argv[1]);
  return ok && group_ok ? 0 : 1;
}
