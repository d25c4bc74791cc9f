// An embedding application: its own actor spawns a tasksup task supervisor as
// a child, receives every event and the final escalation, and decides what to
// do with the result. No registry: the application is the parent.
//
// Usage: embed_example WORKDIR
// Runs an agent (/bin/sh) that fails once with a transient error and then
// succeeds; exits 0 when the result and the events say exactly that.

#include <tasksup/actors/protocol.hpp>
#include <tasksup/actors/task_supervisor_actor.hpp>

#include <tasksup/runtime/process_runtime.hpp>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

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
  return ok ? 0 : 1;
}
