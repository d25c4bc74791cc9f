// `tasksup run TASK.json`: runs one task under full supervision in this
// process and shows its progress.

#include "actor_setup.hpp"
#include "commands.hpp"
#include "config_location.hpp"
#include "event_console.hpp"
#include "node_setup.hpp"
#include "signal_relay.hpp"
#include "task_input.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"
#include "tasksup/runtime/workspace.hpp"

#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/events.hpp"
#include "tasksup/supervisor/group_spec.hpp"

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

using grace_atom = caf::atom_constant<caf::atom("rungrace")>;
using tick_atom = caf::atom_constant<caf::atom("runtick")>;

/// `tasksup run`'s watcher: the task's events, Ctrl-C, its own timers.
using run_watcher_actor =
  subscriber_actor::extend<caf::reacts_to<signal_atom, int>,
                           caf::reacts_to<grace_atom>,
                           caf::reacts_to<tick_atom>>;

struct run_options {
  std::string task_file;
  std::string config_dir;
  std::string runtime;
  std::string events;
  std::string work_dir;
  bool quiet = false;
  bool no_output = false;
};

/// The tasks of a group's tree, in start order.
void group_tasks(const group_spec& g, std::vector<const task_spec*>& out) {
  for (auto& m : g.members) {
    if (m.group)
      group_tasks(*m.group, out);
    else if (m.task)
      out.push_back(&*m.task);
  }
}

/// Whether `ev` says its group ended.
bool ends_group(const event& ev) {
  if (ev.kind != event_kind::group)
    return false;
  auto* f = ev.fields();
  auto* d = f ? std::get_if<event_data::group>(&f->data) : nullptr;
  return d != nullptr && d->change == "ended";
}

int run_task(const run_options& opts) {
  auto fail_input = [](const std::string& text) {
    std::cerr << "tasksup run: " << text << '\n';
    return exit_status::bad_input;
  };
  // Input first: a bad file must not start anything.
  auto cfg = load_node_config(opts.config_dir);
  if (!cfg)
    return fail_input(cfg.error().to_string());
  auto input = read_task_input(opts.task_file);
  if (!input)
    return fail_input(input.error().to_string());
  // A task, or a group document's tree of them.
  std::optional<task_spec> task;
  std::optional<group_spec> group;
  std::vector<const task_spec*> tasks;
  if (is_group_document(input->doc)) {
    auto parsed = parse_group(input->doc, opts.task_file, cfg->config);
    if (!parsed)
      return fail_input(parsed.error().to_string());
    group = std::move(*parsed);
    group_tasks(*group, tasks);
  } else {
    auto parsed = parse_task(input->doc, opts.task_file, cfg->config);
    if (!parsed)
      return fail_input(parsed.error().to_string());
    task = std::move(*parsed);
    tasks.push_back(&*task);
  }
  // One runtime for the run: --runtime, else the (first) task's, else the
  // node's default.
  auto runtime_name = !opts.runtime.empty() ? opts.runtime
                      : !tasks.empty() && !tasks.front()->runtime.empty()
                        ? tasks.front()->runtime
                        : cfg->config.node.default_runtime;
  // Admission: a task that cannot work is not queued.
  for (auto* t : tasks)
    if (auto admitted =
          runtime::admit_task(*t, runtime_name, cfg->config.node.allowed_paths);
        !admitted)
      return fail_input(
        opts.task_file + ": " +
        (group ? "task '" + t->id + "': " : std::string{}) +
        "rejected at admission: " + admitted.error().to_string());
  // The ids whose events a run shows: the task's, or every id of the tree.
  std::set<std::string> shown;
  if (group)
    for (auto& id : tree_ids(*group))
      shown.insert(id);
  // Events to stdout push the human view to stderr.
  std::FILE* json_out = nullptr;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> json_file{nullptr,
                                                            &std::fclose};
  if (opts.events == "-") {
    json_out = stdout;
  } else if (!opts.events.empty()) {
    json_file.reset(std::fopen(opts.events.c_str(), "w"));
    if (!json_file)
      return fail_input("cannot write events to " + opts.events + ": " +
                        std::strerror(errno));
    json_out = json_file.get();
  }
  std::FILE* human = json_out == stdout ? stderr : stdout;
  bool terminal = ::isatty(::fileno(human)) == 1;

  // Signals are taken by a thread of their own before any other thread
  // starts, so every thread inherits the blocked mask.
  signal_relay signals;
  setup_logging(false);
  // Nothing of this run outlives it: each agent's shim kills the agent when
  // this process dies, even by SIGKILL; containers carry the owner label
  // "run" with this process's pid and start time, so a later run removes
  // them should this one be killed before it could.
  auto runtime =
    make_named_runtime(runtime_name, cfg->config.node,
                       runtime_owner{"run", runtime::orphan_policy::kill});
  if (!runtime)
    return fail_input(runtime.error().to_string());
  runtime::reap_report reaped;
  if (runtime_name == "docker") {
    runtime::reap_spec orphans;
    orphans.owner = "run";
    orphans.dead_owners = true;
    reaped = (*runtime)->reap(orphans);
  }

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, false);
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  registry_options reg;
  reg.config = cfg->config;
  reg.runtimes["*"] = *runtime;
  reg.seed = fresh_seed();
  auto attempt_root =
    opts.work_dir.empty() ? fresh_work_dir("run") : absolute_dir(opts.work_dir);
  reg.attempt_root = attempt_root;
  auto registry = spawn_registry(sys, std::move(reg));
  auto shutdown = [&] {
    signals.drop();
    self->send_exit(registry, caf::exit_reason::user_shutdown);
  };

  event_console::options console_opts;
  console_opts.human = human;
  console_opts.terminal = terminal;
  console_opts.quiet = opts.quiet;
  console_opts.view.show_output = !opts.no_output;
  // A group's events come from its tasks and groups: each line says whose.
  console_opts.view.prefix_task = group.has_value();
  console_opts.view.color = terminal;
  console_opts.json = json_out;
  event_console console{console_opts};
  for (auto& line : reaped.reaped)
    console.note("left by a tasksup run that died: " + line);
  for (auto& line : reaped.errors)
    console.note("cannot clean up after a tasksup run that died: " + line);

  // The task is watched by an actor on the scheduler's threads, not by this
  // thread: each event would otherwise wake this thread from another one
  // (several times per attempt), where the watcher takes it on the thread
  // the registry sent it from. This thread waits for the run's status.
  std::promise<int> finished;
  auto status = finished.get_future();
  auto watcher = sys.spawn([&](run_watcher_actor::pointer watch)
                             -> run_watcher_actor::behavior_type {
    struct run_state {
      std::string task_id;
      std::optional<task_result> result;
      bool done_shown = false;
      bool ended = false;
      std::chrono::steady_clock::time_point started;
    };
    auto st = std::make_shared<run_state>();
    auto end = [=, &finished](int code) {
      if (std::exchange(st->ended, true))
        return;
      finished.set_value(code);
      watch->quit();
    };
    auto finish_if_done = [=] {
      if (st->result && st->done_shown)
        end(task_exit_status(*st->result));
    };
    using namespace std::chrono_literals;
    auto on_result = [=](task_result r) {
      st->result = std::move(r);
      finish_if_done();
      // The end event comes before the awaited result; should it ever be
      // lost, the result alone ends the run after a short grace.
      if (!st->ended)
        watch->delayed_send(watch, 2s, grace_atom::value);
    };
    // A request of the watcher's failed (the registry is gone): the run
    // ends with what is known.
    auto on_error = [=, &console](const caf::error& err) {
      console.note("tasksup run: " + error_text(err));
      if (!st->result) {
        task_result r;
        r.task_id = st->task_id;
        r.error = error_text(err);
        on_result(std::move(r));
      }
    };
    // Subscribed before the task is submitted, so no event of it is
    // missed; both answers are awaited, so no event is taken before the
    // task's id is known.
    watch
      ->request(registry, 10s, subscribe_atom::value,
                caf::actor_cast<subscriber_actor>(watch))
      .await(
        [=, &opts, &task, &group, &input](bool) {
          auto submitted = [=](std::string& id) {
            st->task_id = std::move(id);
            st->started = std::chrono::steady_clock::now();
            watch
              ->request(registry, caf::infinite, await_atom::value, st->task_id)
              .then([=](task_result& r) { on_result(std::move(r)); },
                    [=](caf::error& err) { on_error(err); });
          };
          auto refused = [=, &opts](caf::error& err) {
            std::cerr << "tasksup run: " << opts.task_file
                      << ": rejected: " << error_text(err) << '\n';
            end(exit_status::bad_input);
          };
          if (group)
            watch
              ->request(registry, 10s, submit_json_atom::value, input->text,
                        false)
              .await(submitted, refused);
          else
            watch->request(registry, 10s, submit_atom::value, *task)
              .await(submitted, refused);
        },
        [=](caf::error& err) {
          std::cerr << "tasksup run: cannot subscribe to events: "
                    << error_text(err) << '\n';
          end(1);
        });
    // A terminal's countdown is redrawn four times a second.
    if (console_opts.human != nullptr && console_opts.terminal &&
        !console_opts.quiet)
      watch->send(watch, tick_atom::value);
    return {
      [=, &console, &attempt_root, &shown](event_atom, const event& ev) {
        if (ev.task_id != st->task_id && shown.count(ev.task_id) == 0)
          return;
        progress_view::extra extra;
        if (ev.kind == event_kind::task_done) {
          extra.duration_s = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - st->started)
                               .count();
          // Attempt n of the task keeps its output in
          // <log_dir>/attempt-<n>.
          extra.log_dir = attempt_root + "/" + ev.task_id;
        }
        if (ev.task_id == st->task_id &&
            (ev.kind == event_kind::task_done || ends_group(ev)))
          st->done_shown = true;
        console.write(ev, extra);
        finish_if_done();
      },
      [=](grace_atom) { end(task_exit_status(*st->result)); },
      [=, &console](signal_atom, int count) {
        auto mode = count == 1 ? stop_mode::cancel : stop_mode::kill;
        console.note(count == 1 ? "stopping the task (Ctrl-C again to kill it)"
                                : "killing the task");
        // The answer does not matter; the task's events tell the rest.
        watch
          ->request(registry, caf::infinite, stop_atom::value, st->task_id,
                    mode)
          .then([](bool) {}, [=](caf::error& err) { on_error(err); });
      },
      [=, &console](dropped_atom, const std::string& why) {
        console.note("tasksup run: events of the task were lost: " + why);
      },
      [=, &console](tick_atom) {
        console.tick();
        watch->delayed_send(watch, 250ms, tick_atom::value);
      },
    };
  });
  // A Ctrl-C that came before the watcher could take it still counts.
  if (auto early_signals = signals.aim(watcher); early_signals > 0)
    caf::anon_send(watcher, signal_atom::value, early_signals);
  auto code = status.get();
  console.clear_countdown();
  shutdown();
  return code;
}

void setup_run(CLI::App& app, int& status) {
  auto opts = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand(
    "run", "Run one task (or a group of tasks) under full supervision in "
           "this process and show its progress; exits with the task's "
           "status.");
  cmd
    ->add_option("task", opts->task_file,
                 "The task file (JSON; docs/BEHAVIOUR.md, Task file), or a "
                 "group file ({\"group\": {...}}; docs/BEHAVIOUR.md, Groups)")
    ->required();
  add_config_option(*cmd, opts->config_dir);
  add_runtime_option(*cmd, opts->runtime,
                     "Run attempts as local processes or in Docker containers "
                     "(default: the task's `runtime`, else node.json's)");
  cmd->add_option("--events", opts->events,
                  "Write every event as one JSON line to FILE, or to stdout "
                  "with `-` (the progress view then goes to stderr)");
  add_work_dir_option(*cmd, opts->work_dir, "run");
  cmd->add_flag("--quiet,-q", opts->quiet,
                "Show only the final summary and warnings");
  cmd->add_flag("--no-output", opts->no_output,
                "Do not show the agents' own output lines");
  cmd->footer(std::string{config_dir_rule} + R"(

On a terminal the progress is live (with a countdown while a retry waits);
otherwise it is plain lines. Ctrl-C stops the task gracefully (the agent gets
SIGTERM, a pending retry is skipped); a second Ctrl-C kills it.

A group file runs its whole tree: each line names its task or group, and the
run ends with the top group (Ctrl-C stops the group, its members in reverse
order). Every task of the group runs on one runtime: --runtime, else the
first task's, else node.json's.

Exit status: 0 the task succeeded; the task's last exit code when it failed
(1 if that was 0 or unknown); 130 stopped by the user; 2 bad input (an
unreadable or invalid task or config file: nothing was run).

Example:
  tasksup run --config config config/examples/demo-recovery.json
  tasksup run task.json --events events.jsonl --no-output)");
  cmd->callback([opts, &status] { status = run_task(*opts); });
}

command_registrar registrar{10, setup_run};

} // namespace

} // namespace tasksup::app
