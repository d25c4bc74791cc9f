// `tasksup status [TASK]`: what a node's tasks are doing.

#include "actor_setup.hpp"
#include "commands.hpp"
#include "json_text.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"
#include "status_record.hpp"
#include "status_view.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/actor_cast.hpp>
#include <caf/after.hpp>
#include <caf/system_messages.hpp>

#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct status_options {
  std::string task_id;
  std::string node;
  bool json = false;
  /// Only tasks in these states (empty: all).
  std::vector<std::string> states;
  /// Only finished tasks with these outcomes (empty: all).
  std::vector<std::string> outcomes;
  /// Redraw as the node's tasks change, until Ctrl-C.
  bool watch = false;
  /// Only tasks of this agent.
  std::string agent;
  /// The page: --limit, --after.
  status_page_options page;
};

/// The statistics' `(view)` text with every task's times; empty when the
/// node does not answer it (an older node).
std::string fetch_times(node_session& s) {
  std::string out;
  s.self->request(s.node, node_request_timeout, view_atom::value)
    .receive([&](std::string& text) { out = std::move(text); },
             [](caf::error&) {});
  return out;
}

/// `x` read back as the control socket's answer is: Boost.JSON (1.81) reads
/// some numbers one unit in the last place off, and both paths must print
/// the same bytes.
status_answer as_socket_reads(status_answer x) {
  if (auto same = parse_status_answer(status_answer_json(x)))
    return std::move(*same);
  return x;
}

/// The node's tasks (a page of those `filter` admits, all of them a chunk
/// at a time, or the one task of `opts`) with their times; nullopt, with
/// the failure reported and its exit status in `rc`, when the node did not
/// answer. With `stream`, each chunk of an unlimited listing goes there as
/// it comes and the answer keeps none of its rows.
std::optional<status_answer>
fetch_status(node_session& s, const status_options& opts,
             const status_filter& filter, int& rc,
             const std::function<void(const status_answer&)>& stream = {}) {
  auto on_error = [&](caf::error& err) {
    rc = report_request_error(s, err, exit_status::unavailable);
  };
  std::optional<status_answer> answer;
  if (!opts.task_id.empty()) {
    s.self
      ->request(s.node, node_request_timeout, status_atom::value, opts.task_id)
      .receive(
        [&](task_status& st) {
          answer = as_socket_reads(
            make_status_answer({std::move(st)}, fetch_times(s)));
        },
        on_error);
    return answer;
  }
  auto q = make_status_query(opts.page, filter);
  bool all = q.limit == 0;
  if (all)
    q.limit = status_chunk;
  answer.emplace();
  for (bool more = true; more;) {
    std::optional<status_page> page;
    s.self->request(s.node, node_request_timeout, status_atom::value, q)
      .receive([&](status_page& x) { page = std::move(x); }, on_error);
    if (!page)
      return std::nullopt;
    more = all && page->more > 0 && !page->tasks.empty();
    if (more)
      q.after = page->tasks.back().task_id;
    auto chunk = as_socket_reads(make_status_answer(*page));
    if (all && chunk.paging)
      chunk.paging->more = 0; // the next chunk follows: no "more" line
    answer->now = chunk.now;
    answer->paging = chunk.paging;
    if (stream) {
      stream(chunk);
    } else {
      auto& rows = answer->rows;
      rows.insert(rows.end(), std::make_move_iterator(chunk.rows.begin()),
                  std::make_move_iterator(chunk.rows.end()));
    }
  }
  // The schedules' next runs go under the table (none from a node that
  // runs none, or from one before schedules).
  s.self
    ->request(s.node, node_request_timeout, schedule_atom::value,
              schedule_request{})
    .receive(
      [&](std::vector<schedule_info>& list) {
        status_answer schedules;
        for (auto& x : list)
          schedules.schedules.push_back(schedule_record(x));
        answer->schedules = as_socket_reads(std::move(schedules)).schedules;
      },
      [](caf::error&) {});
  return answer;
}

/// `status --watch`: the table again whenever the node's events say its
/// tasks changed, until Ctrl-C/SIGTERM, the watched TASK is done, or the
/// node goes away. On a terminal the table is redrawn in place (and its
/// ages kept current); elsewhere each change prints the rows of the tasks
/// that changed, as `kubectl get -w` does, so a log reads top to bottom.
int watch_status(node_session& s, const status_options& opts,
                 const status_filter& filter) {
  int rc = exit_status::ok;
  auto me = caf::actor_cast<subscriber_actor>(s.self);
  // Subscribed before the first table: no change falls between the two.
  if (!subscribe_to_node(s, rc))
    return rc;
  bool single = !opts.task_id.empty();
  bool terminal = ::isatty(STDOUT_FILENO) == 1 && !opts.json;
  // What each task looked like when last printed (line mode).
  std::map<std::string, std::string> shown;
  bool first = true;
  bool finished = false;
  auto draw = [&]() -> bool {
    auto answer = fetch_status(s, opts, filter, rc);
    if (!answer)
      return false;
    if (single && !answer->rows.empty())
      finished = json_text_at(answer->rows.front().record, "state") == "done";
    if (terminal) {
      std::cout << "\x1b[H\x1b[2J"
                << "tasksup status --watch: the node at " << s.address
                << " (Ctrl-C to stop)\n\n";
      print_status(*answer, single, false, filter);
      std::cout.flush();
      return true;
    }
    status_answer changed;
    changed.now = answer->now;
    for (auto& row : answer->rows) {
      if (!single && !filter.admits(row.record))
        continue;
      auto id = json_text_at(row.record, "task_id");
      auto look = json_text(row.record) + row.last_decision;
      auto& before = shown[id];
      if (before != look) {
        before = std::move(look);
        changed.rows.push_back(row);
      }
    }
    // The first time, even no tasks are news.
    if (!changed.rows.empty() || first) {
      print_status(changed, single, opts.json, filter);
      std::cout.flush();
    }
    first = false;
    return true;
  };
  if (!draw())
    return rc;
  // Events are acknowledged as `events --follow` does: the node drops a
  // subscriber that acknowledges nothing for a while.
  constexpr auto tick = std::chrono::milliseconds{250};
  constexpr auto redraw_every = std::chrono::seconds{1};
  constexpr auto quiet_limit = std::chrono::seconds{5};
  std::uint64_t received = 0;
  std::uint64_t acked = 0;
  bool dirty = false;
  bool running = !finished;
  auto last_drawn = std::chrono::steady_clock::now();
  while (running) {
    s.self->receive(
      [&](event_atom, const event& ev) {
        ++received;
        if (!single || ev.task_id == opts.task_id)
          dirty = true;
      },
      [&](dropped_atom, const std::string& why) {
        std::cerr << "tasksup status: the node at " << s.address << ": "
                  << cell(why.substr(0, 512)) << '\n';
        rc = exit_status::unavailable;
        running = false;
      },
      [&](signal_atom, int) { running = false; },
      [&](caf::down_msg&) {
        std::cerr << "tasksup status: lost the connection to the node at "
                  << s.address << '\n';
        rc = exit_status::unavailable;
        running = false;
      },
      [&](bool) {}, [&](caf::error&) {}, caf::after(tick) >> [] {});
    if (!running)
      break;
    if (received > acked) {
      s.self->send(s.node, ack_atom::value, received);
      acked = received;
    }
    auto now = std::chrono::steady_clock::now();
    // A quiet node is asked again now and then: its answer shows it is
    // still there (commands use no connection timeout).
    if (dirty || (terminal && now - last_drawn >= redraw_every) ||
        now - last_drawn >= quiet_limit) {
      dirty = false;
      last_drawn = now;
      if (!draw())
        break;
      if (finished)
        running = false;
    }
  }
  if (rc == exit_status::ok)
    s.self->send(s.node, unsubscribe_atom::value, me);
  return rc;
}

int status(const status_options& opts) {
  status_filter filter;
  auto bad = [](const std::string& text) {
    std::cerr << "tasksup status: " << text << '\n';
    return exit_status::bad_input;
  };
  if (auto err = parse_state_filter(opts.states, filter.states))
    return bad(*err);
  if (auto err = parse_outcome_filter(opts.outcomes, filter.outcomes))
    return bad(*err);
  filter.agent = opts.agent;
  if (auto err = check_agent_filter(filter.agent))
    return bad(*err);
  if (auto err = check_page_options(opts.page))
    return bad(*err);
  return with_node("status", opts.node, opts.watch, [&](node_session& s) {
    if (opts.watch)
      return watch_status(s, opts, filter);
    int rc = exit_status::ok;
    // Every task as JSON: printed a chunk at a time, as it comes.
    std::function<void(const status_answer&)> stream;
    if (opts.json && opts.task_id.empty() && opts.page.limit == 0)
      stream = [&](const status_answer& chunk) {
        print_status(chunk, false, true, filter);
      };
    auto answer = fetch_status(s, opts, filter, rc, stream);
    if (!answer)
      return rc;
    if (!stream)
      print_status(*answer, !opts.task_id.empty(), opts.json, filter,
                   next_page_command(opts.page, filter));
    return rc;
  });
}

void setup_status(CLI::App& app, int& status_code) {
  auto opts = std::make_shared<status_options>();
  auto* cmd = app.add_subcommand(
    "status", "Show what a node's tasks are doing: state, agent, attempt, "
              "retries, age, next retry and outcome.");
  cmd->add_option("task", opts->task_id, "Only this task (by id)");
  cmd->add_flag("--json", opts->json,
                "Print JSON instead of a table: one task record per line "
                "(JSON Lines; one object with TASK), with the final result "
                "of finished tasks as `task_done` carries it and the times "
                "submitted_ts, next_retry_ts, finished_ts (seconds since the "
                "epoch, null when unknown); how many more tasks a page "
                "leaves goes to stderr");
  cmd->add_option("--state", opts->states,
                  "Only tasks in this state: queued, running, backoff, "
                  "paused, quota_wait, not_now or done (repeat or separate "
                  "with commas)");
  cmd->add_option("--outcome", opts->outcomes,
                  "Only finished tasks with this outcome: succeeded, failed "
                  "or stopped (repeat or separate with commas; combines "
                  "with --state)");
  cmd->add_option("--agent", opts->agent,
                  "Only tasks whose current (or last) attempt is this "
                  "agent's");
  cmd
    ->add_option("--limit", opts->page.limit,
                 "At most N tasks, in task id order, and how many more "
                 "there are (default: all)")
    ->check(CLI::Range(0u, max_status_limit));
  cmd->add_option("--after", opts->page.after,
                  "Only tasks whose id sorts after this one: the last task "
                  "of the page before (what the line under a page names)");
  cmd->add_flag("--watch,-w", opts->watch,
                "Keep watching: show the tasks again whenever they change "
                "(on a terminal the table is redrawn in place; otherwise "
                "each change prints the rows of the tasks that changed), "
                "until Ctrl-C or SIGTERM, or until TASK is done");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

States: queued (waiting for an attempt slot), running, backoff (waiting to
retry), paused (by `tasksup pause`, until `tasksup resume`), quota_wait
(its agent's usage quota is used up: waiting for the reset), not_now (its
preflight said not now, exit 75: waiting to try again, spending no retry),
done. AGE is
the time since the task was submitted; NEXT RETRY the wait left before a
task in backoff tries again, or before a quota resets. With TASK, the
times follow the table in ISO 8601 (UTC). On the node's machine, without
--certs, --insecure or $TASKSUP_CERTS, the command asks over the node's
control socket (<state dir>/control-PORT.sock; see `tasksup serve --help`)
when it is there. The node keeps finished tasks as its retention says
(`tasksup serve --retain-tasks/--retain-days`); asked for one it no longer
keeps, it says when and why that one expired. An unknown task id exits with
status 3.

Pages: the node filters (--state, --outcome, --agent) and pages (--limit,
--after) itself and sends only the page, in task id order; under the table
a line says how many more tasks there are and the command that shows them.
Without --limit, every task is listed.

Example:
  tasksup status
  tasksup status --limit 100
  tasksup status --limit 100 --after t-0099
  tasksup status --state running,backoff --agent claude
  tasksup status --outcome failed
  tasksup status --watch
  tasksup status demo-flaky --json)");
  cmd->callback([opts, &status_code] { status_code = status(*opts); });
}

command_registrar registrar{60, setup_status};

} // namespace

} // namespace tasksup::app
