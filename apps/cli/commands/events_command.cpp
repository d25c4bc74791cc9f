// `tasksup events [TASK]`: a node's events, as they happen with --follow.

#include "actor_setup.hpp"
#include "commands.hpp"
#include "event_console.hpp"
#include "node_client.hpp"

#include "safe_text.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/system_messages.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::app {

namespace {

struct events_options {
  std::string task_id;
  std::string node;
  bool follow = false;
  bool json = false;
  bool no_output = false;
};

/// The `task_done` event of a finished task, rebuilt from its status
/// record when the node's journal no longer has the task's events (its
/// `span_id` and `ts` are then unknown).
std::string done_event_json(const task_status& s) {
  json_writer w;
  w.begin_object();
  w.key("event");
  w.raw_string("task_done");
  w.key("task_id");
  w.string(s.task_id);
  w.key("attempt");
  w.integer(s.attempt);
  w.key("trace_id");
  w.string(s.trace_id);
  if (s.result)
    write_result_fields(w, *s.result);
  w.end_object();
  return w.take();
}

/// What the node still has: the final event of finished tasks and a line
/// for each running one.
int snapshot(node_session& s, event_console& console,
             const events_options& opts) {
  int rc = exit_status::ok;
  auto me = caf::actor_cast<subscriber_actor>(s.self);
  // A finished task's own task_done event, with its span id and time, as
  // the node journaled it.
  auto done_event = [&](const task_status& st) {
    std::string out;
    s.self
      ->request(s.node, node_request_timeout, subscribe_atom::value, me,
                st.task_id)
      .receive(
        [&](std::vector<event>& past) {
          s.self->send(s.node, unsubscribe_atom::value, me);
          for (auto& ev : past)
            if (ev.kind == event_kind::task_done)
              out = ev.json();
        },
        [](caf::error&) {});
    return out.empty() ? done_event_json(st) : out;
  };
  auto show = [&](const std::vector<task_status>& all) {
    for (auto& st : all) {
      if (st.state == task_state::done)
        console.write(done_event(st));
      else if (!opts.json)
        console.note("[" + st.task_id + "] " +
                     std::string{to_string(st.state)} + ", attempt " +
                     std::to_string(st.attempt) +
                     (st.agent_id.empty() ? "" : " (" + st.agent_id + ")"));
    }
  };
  auto on_error = [&](caf::error& err) {
    rc = report_request_error(s, err, exit_status::unavailable);
  };
  if (opts.task_id.empty()) {
    std::vector<task_status> all;
    s.self->request(s.node, node_request_timeout, status_atom::value)
      .receive([&](std::vector<task_status>& xs) { all = std::move(xs); },
               on_error);
    show(all);
    return rc;
  }
  // One task: its whole history (the node's journal keeps it past the
  // task's end and across restarts).
  s.self
    ->request(s.node, node_request_timeout, subscribe_atom::value, me,
              opts.task_id)
    .receive(
      [&](std::vector<event>& past) {
        s.self->send(s.node, unsubscribe_atom::value, me);
        for (auto& ev : past)
          console.write(ev.json());
      },
      on_error);
  return rc;
}

/// Streams events until the task ends (with TASK), Ctrl-C, or the node
/// goes away.
int follow(node_session& s, event_console& console,
           const events_options& opts) {
  auto me = caf::actor_cast<subscriber_actor>(s.self);
  int rc = exit_status::ok;
  if (opts.task_id.empty()) {
    if (!subscribe_to_node(s, rc))
      return rc;
  } else {
    // The task's events so far and the subscription in one request: a
    // task submitted a moment ago is seen from its first event.
    bool subscribed = false;
    bool done = false;
    s.self
      ->request(s.node, node_request_timeout, subscribe_atom::value, me,
                opts.task_id)
      .receive(
        [&](std::vector<event>& past) {
          subscribed = true;
          // As a live follow does, end with the task's task_done.
          for (auto& ev : past) {
            console.write(ev.json());
            if (ev.kind == event_kind::task_done) {
              done = true;
              break;
            }
          }
        },
        [&](caf::error& err) {
          rc = report_request_error(s, err, exit_status::unavailable);
        });
    if (!subscribed)
      return rc;
    if (done) {
      s.self->send(s.node, unsubscribe_atom::value, me);
      return exit_status::ok;
    }
    s.self->monitor(s.node);
  }
  // Every event handled is acknowledged, in batches and at each tick: the
  // node drops a subscriber that acknowledges nothing for a while when
  // events wait for it (a stalled terminal or pipe). When the node has
  // been quiet for a while, the acknowledgement goes as a request: its
  // answer shows the node is alive and still serves us (commands do not
  // use CAF's connection timeout; see disable_connection_timeout).
  constexpr std::uint64_t ack_every = 64;
  constexpr auto ack_period = std::chrono::milliseconds{250};
  constexpr auto quiet_limit = std::chrono::seconds{5};
  std::uint64_t received = 0;
  std::uint64_t acked = 0;
  auto last_heard = std::chrono::steady_clock::now();
  auto last_ack = last_heard;
  auto ack = [&] {
    if (received > acked) {
      s.self->send(s.node, ack_atom::value, received);
      acked = received;
      last_ack = std::chrono::steady_clock::now();
    }
  };
  // After each event handled: a batch is full, or the last
  // acknowledgement is a tick old (a slow steady stream).
  auto maybe_ack = [&] {
    if (received - acked >= ack_every || last_heard - last_ack >= ack_period)
      ack();
  };
  bool running = true;
  auto probe = [&] {
    s.self->request(s.node, node_request_timeout, ack_atom::value, received)
      .receive(
        [&](bool served) {
          acked = received;
          last_heard = std::chrono::steady_clock::now();
          if (!served) {
            console.clear_countdown();
            // Dropped: its notice is still on the way (this command
            // was stopped, and the tick came before it).
            std::cerr << "tasksup events: the node at " << s.address
                      << ": dropped: did not keep up; the node sends this "
                         "command no more events\n";
            rc = exit_status::unavailable;
            running = false;
          }
        },
        [&](caf::error& err) {
          console.clear_countdown();
          rc = report_request_error(s, err, exit_status::unavailable);
          running = false;
        });
  };
  while (running) {
    bool quiet = false;
    s.self->receive(
      [&](event_atom, const event& ev) {
        ++received;
        last_heard = std::chrono::steady_clock::now();
        if (!opts.task_id.empty() && ev.task_id != opts.task_id) {
          maybe_ack();
          return;
        }
        console.write(ev.json());
        maybe_ack();
        if (!opts.task_id.empty() && ev.kind == event_kind::task_done)
          running = false;
      },
      [&](dropped_atom, const std::string& why) {
        console.clear_countdown();
        std::cerr << "tasksup events: the node at " << s.address << ": "
                  << printable(why.substr(0, 512)) << '\n';
        rc = exit_status::unavailable;
        running = false;
      },
      [&](signal_atom, int) { running = false; },
      [&](caf::down_msg&) {
        console.clear_countdown();
        std::cerr << "tasksup events: lost the connection to the node at "
                  << s.address << '\n';
        rc = exit_status::unavailable;
        running = false;
      },
      [&](bool) {}, [&](caf::error&) {},
      caf::after(ack_period) >>
        [&] {
          console.tick();
          ack();
          quiet = std::chrono::steady_clock::now() - last_heard >= quiet_limit;
        });
    if (running && quiet)
      probe();
  }
  console.clear_countdown();
  if (rc == exit_status::ok)
    s.self->send(s.node, unsubscribe_atom::value, me);
  return rc;
}

void setup_events(CLI::App& app, int& status) {
  auto opts = std::make_shared<events_options>();
  auto* cmd = app.add_subcommand(
    "events", "Show a node's task events: attempts, classifications, "
              "retries, agent switches and results.");
  cmd->add_option("task", opts->task_id, "Only this task's events");
  cmd->add_flag("--follow,-f", opts->follow,
                "Stream events as they happen, until TASK ends (or, without "
                "TASK, until Ctrl-C)");
  cmd->add_flag(
    "--json", opts->json,
    "Print the events as JSON lines (docs/BEHAVIOUR.md, Events) instead of the "
    "progress view");
  cmd->add_flag("--no-output", opts->no_output,
                "Do not show the agents' own output lines");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Without --follow, TASK prints every event of the task so far (from the
node's journal: finished tasks and tasks from before a restart included;
agent output lines only while the node that ran them is up, see `tasksup
logs`); without TASK it prints the task_done event of every finished task
and, except with --json, the state of the running ones.

With --follow the command acknowledges the events it has shown, and the node
sends events to it only while it keeps up: if its output is not read (a
stalled pipe or terminal) for 10 s while events wait, or more than 65,536
events (64 MiB) wait for it, the node drops the subscription; the command
then prints the node's notice, "dropped: did not keep up", and exits 3, as
it does when the connection is lost.

Example:
  tasksup events --follow demo-flaky
  tasksup events --follow --json > events.jsonl)");
  cmd->callback([opts, &status] {
    status =
      with_node("events", opts->node, opts->follow, [&](node_session& s) {
        event_console::options copts;
        copts.terminal = ::isatty(::fileno(stdout)) == 1;
        copts.view.show_output = !opts->no_output;
        copts.view.prefix_task = opts->task_id.empty();
        copts.view.color = copts.terminal;
        copts.view.show_time = true;
        if (opts->json) {
          copts.human = nullptr;
          copts.json = stdout;
        }
        event_console console{copts};
        return opts->follow ? follow(s, console, *opts)
                            : snapshot(s, console, *opts);
      });
  });
}

command_registrar registrar{80, setup_events};

} // namespace

} // namespace tasksup::app
