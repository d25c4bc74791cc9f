// `tasksup wait | describe | logs TASK`: what a task did, from the node's
// journal (and, for `logs`, its attempt directories).

#include "actor_setup.hpp"
#include "commands.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/time_words.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <caf/actor_cast.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tasksup::app {

namespace {

// -- wait -----------------------------------------------------------------

struct wait_options {
  std::string task_id;
  std::string node;
  double timeout_s = 0;
};

int wait_for(node_session& s, const wait_options& opts) {
  using clock = std::chrono::steady_clock;
  auto deadline =
    clock::now() + std::chrono::duration_cast<clock::duration>(
                     std::chrono::duration<double>(opts.timeout_s));
  for (;;) {
    std::optional<task_status> status;
    int rc = exit_status::ok;
    s.self
      ->request(s.node, node_request_timeout, status_atom::value, opts.task_id)
      .receive([&](task_status& x) { status = std::move(x); },
               [&](caf::error& err) {
                 rc = report_request_error(s, err, exit_status::unavailable);
               });
    if (!status)
      return rc;
    if (status->state == task_state::done && status->result) {
      auto& r = *status->result;
      if (r.error)
        std::cerr << "task " << r.task_id << " " << to_string(r.outcome) << ": "
                  << *r.error << '\n';
      // A checked answer is the task's output, for the next command.
      if (!r.answer.empty())
        std::cout << r.answer << '\n';
      return task_exit_status(r);
    }
    if (opts.timeout_s > 0 && clock::now() >= deadline) {
      std::cerr << "tasksup wait: task " << opts.task_id
                << " has not finished after " << opts.timeout_s << " s ("
                << to_string(status->state) << ", attempt " << status->attempt
                << ")\n";
      return exit_status::timed_out;
    }
    // Polling keeps nothing pending on the node while waiting.
    s.self->receive([](signal_atom, int) {},
                    caf::after(std::chrono::milliseconds{200}) >> [] {});
  }
}

void setup_wait(CLI::App& app, int& status) {
  auto opts = std::make_shared<wait_options>();
  auto* cmd = app.add_subcommand(
    "wait", "Wait for a task to finish and exit with its exit status.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  cmd
    ->add_option("--timeout", opts->timeout_s,
                 "Give up after this many seconds (exit 124); 0 waits for "
                 "ever")
    ->check(CLI::NonNegativeNumber);
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

A task with an answer schema (its own, or its role's) prints its checked
answer, one line of JSON, on standard output when it succeeded.

Exit status: 0 when the task succeeded, the last attempt's exit code (1 when
it had none) when it failed, 130 when it was stopped, 124 on --timeout, 3
when the node could not be reached or does not know the task.

Example:
  id=$(tasksup submit fix-login.json) && tasksup wait "$id" && git log -1)");
  cmd->callback([opts, &status] {
    status = with_node("wait", opts->node, false,
                       [&](node_session& s) { return wait_for(s, *opts); });
  });
}

// -- describe -------------------------------------------------------------

struct describe_options {
  std::string task_id;
  std::string node;
};

/// The task's events so far (then no more).
std::optional<std::vector<event>> history(node_session& s,
                                          const std::string& task_id, int& rc) {
  auto me = caf::actor_cast<subscriber_actor>(s.self);
  std::optional<std::vector<event>> out;
  s.self
    ->request(s.node, node_request_timeout, subscribe_atom::value, me, task_id)
    .receive([&](std::vector<event>& evs) { out = std::move(evs); },
             [&](caf::error& err) {
               rc = report_request_error(s, err, exit_status::unavailable);
             });
  if (out)
    s.self->send(s.node, unsubscribe_atom::value, me);
  return out;
}

std::string text_of(const boost::json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  if (!v || v->is_null())
    return {};
  if (v->is_string())
    return std::string{v->get_string()};
  if (v->is_int64())
    return std::to_string(v->get_int64());
  if (v->is_uint64())
    return std::to_string(v->get_uint64());
  if (v->is_double()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g", v->get_double());
    return buf;
  }
  if (v->is_bool())
    return v->get_bool() ? "true" : "false";
  return {};
}

std::string iso_time(double ts) {
  auto secs = static_cast<std::time_t>(ts);
  std::tm utc{};
  ::gmtime_r(&secs, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

/// One line per step of the task: attempts with agent, start, duration and
/// exit; the judgement of each failure (class, rule, line); every decision
/// with its delay and where the delay came from.
int describe(node_session& s, const describe_options& opts) {
  int rc = exit_status::ok;
  auto evs = history(s, opts.task_id, rc);
  if (!evs)
    return rc;
  std::cout << "task " << opts.task_id << '\n';
  // The task's state directory (TASKSUP_MEMBER_STATE), shown with the
  // first attempt and again should another node's attempt have another.
  std::string state_shown;
  for (auto& ev : *evs) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(ev.json(), ec);
    if (ec || !doc.is_object())
      continue;
    auto& o = doc.get_object();
    auto when = iso_time(ev.ts);
    auto kind = ev.kind;
    switch (kind) {
      case event_kind::task_submitted:
        std::cout << when << "  submitted";
        if (auto env = text_of(o, "environment"); !env.empty())
          std::cout << " (environment " << env << ")";
        std::cout << '\n';
        break;
      case event_kind::attempt_started:
        std::cout << when << "  attempt " << ev.attempt << " started: agent "
                  << text_of(o, "agent_id") << '\n';
        if (auto state = text_of(o, "member_state");
            !state.empty() && state != state_shown) {
          std::cout << when << "    member state: " << state << '\n';
          state_shown = std::move(state);
        }
        break;
      case event_kind::attempt_exited: {
        auto infra = text_of(o, "infrastructure_error");
        if (text_of(o, "exit_code") == "-1" && !infra.empty()) {
          // No exit code of its own: its node was lost, its worker never
          // reported.
          std::cout << when << "  attempt " << ev.attempt
                    << " was lost: " << infra << '\n';
          break;
        }
        std::cout << when << "  attempt " << ev.attempt << " exited "
                  << text_of(o, "exit_code");
        if (auto d = text_of(o, "duration_s"); !d.empty())
          std::cout << " after " << d << " s";
        if (auto sig = text_of(o, "signal"); !sig.empty() && sig != "0")
          std::cout << " (signal " << sig << ")";
        if (text_of(o, "oom_killed") == "true")
          std::cout << " (out of memory)";
        if (!infra.empty())
          std::cout << ": " << infra;
        std::cout << '\n';
        break;
      }
      case event_kind::classified: {
        std::cout << when << "    class " << text_of(o, "class") << ", rule "
                  << text_of(o, "rule");
        if (auto line = text_of(o, "line"); !line.empty())
          std::cout << ", line \"" << line << "\"";
        std::cout << '\n';
        break;
      }
      case event_kind::retry_scheduled:
        // A permanent task's restart after exit 0 is not a retry.
        if (auto n = o.if_contains("restart");
            n && n->is_int64() && n->get_int64() > 0) {
          auto* ran = o.if_contains("ran_s");
          std::cout << when << "    decision: "
                    << restart_words(
                         static_cast<std::size_t>(n->get_int64()),
                         ran && ran->is_number() ? ran->to_number<double>() : 0,
                         text_of(o, "stable") == "true");
        } else {
          std::cout << when << "    decision: retry "
                    << text_of(o, "retry_count") << "/"
                    << text_of(o, "max_retries");
        }
        std::cout << " in " << text_of(o, "delay_s") << " s ("
                  << text_of(o, "delay_source") << ")";
        if (auto reason = text_of(o, "reason"); !reason.empty())
          std::cout << ": " << reason;
        std::cout << '\n';
        break;
      case event_kind::agent_switched:
        std::cout << when << "    decision: fall back from "
                  << text_of(o, "from") << " to " << text_of(o, "to");
        if (auto reason = text_of(o, "reason"); !reason.empty())
          std::cout << ": " << reason;
        std::cout << '\n';
        break;
      case event_kind::user_stop:
        std::cout << when << "  user " << text_of(o, "mode") << ": "
                  << text_of(o, "message") << '\n';
        break;
      case event_kind::warning:
        std::cout << when << "  warning: " << text_of(o, "message") << '\n';
        break;
      case event_kind::task_done: {
        std::cout << when << "  done: " << text_of(o, "outcome");
        if (auto err = text_of(o, "error"); !err.empty())
          std::cout << ": " << err;
        std::cout << '\n';
        if (auto* answer = o.if_contains("answer"))
          std::cout << when << "  answer: "
                    << printable(boost::json::serialize(*answer)) << '\n';
        break;
      }
      case event_kind::step: {
        if (text_of(o, "step") == "user_retry") {
          std::cout << when << "  user retry-now: " << text_of(o, "message")
                    << '\n';
          break;
        }
        if (auto step = text_of(o, "step");
            step == "pause" || step == "resume") {
          std::cout << when << "  user " << step << ": "
                    << text_of(o, "message") << '\n';
          break;
        }
        if (text_of(o, "step") == "not_now") {
          std::cout << when << "    decision: " << text_of(o, "message")
                    << '\n';
          break;
        }
        if (text_of(o, "step") == "quota_wait") {
          std::cout << when << "    decision: wait for the quota of "
                    << text_of(o, "name") << ": " << text_of(o, "message")
                    << '\n';
          break;
        }
        std::cout << when << "    " << text_of(o, "step");
        if (auto name = text_of(o, "name"); !name.empty())
          std::cout << " " << name;
        if (auto passed = text_of(o, "passed"); !passed.empty())
          std::cout << (passed == "true" ? ": passed" : ": failed");
        if (auto msg = text_of(o, "message"); !msg.empty())
          std::cout << " (" << msg << ")";
        std::cout << '\n';
        break;
      }
      case event_kind::group: {
        auto change = text_of(o, "change");
        auto member = text_of(o, "member");
        std::cout << when << "  group: ";
        if (change == "restart") {
          std::string list;
          if (auto* ms = o.if_contains("members"); ms && ms->is_array())
            for (auto& m : ms->get_array())
              if (m.is_string())
                list +=
                  (list.empty() ? "" : ", ") + std::string{m.get_string()};
          std::cout << "restart " << text_of(o, "restarts") << " of " << list
                    << " after '" << member << "' ended " << text_of(o, "how");
        } else if (change == "ended") {
          std::cout << "ended " << text_of(o, "how");
          if (!member.empty())
            std::cout << " ('" << member << "')";
          std::cout << ": " << text_of(o, "outcome");
        } else if (change == "started") {
          std::cout << "every member started";
        } else {
          std::cout << change << " '" << member << "'";
          if (auto how = text_of(o, "how"); !how.empty())
            std::cout << ": " << how;
        }
        std::cout << '\n';
        break;
      }
      case event_kind::log:
      case event_kind::escalated:
        break;
    }
  }
  return rc;
}

void setup_describe(CLI::App& app, int& status) {
  auto opts = std::make_shared<describe_options>();
  auto* cmd = app.add_subcommand(
    "describe", "Show a task's history: every attempt (agent, start, "
                "duration, exit), how each failure was classified, and every "
                "decision with its delay and the delay's source.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

The history comes from the node's journal, so it covers finished tasks and
tasks that ran before the node restarted. Times are UTC (ISO 8601).

Example:
  tasksup describe fix-login)");
  cmd->callback([opts, &status] {
    status = with_node("describe", opts->node, false,
                       [&](node_session& s) { return describe(s, *opts); });
  });
}

// -- logs -----------------------------------------------------------------

struct logs_options {
  std::string task_id;
  std::string node;
  int attempt = 0;
  bool follow = false;
};

int logs(node_session& s, const logs_options& opts) {
  int attempt = opts.attempt;
  std::uint64_t offset = 0;
  for (;;) {
    int rc = exit_status::ok;
    bool answered = false;
    bool complete = false;
    std::size_t got = 0;
    s.self
      ->request(s.node, node_request_timeout, logs_atom::value, opts.task_id,
                attempt, offset)
      .receive(
        [&](int a, std::uint64_t next, std::string& data, bool done) {
          answered = true;
          attempt = a;
          offset = next;
          complete = done;
          got = data.size();
          std::cout.write(data.data(), static_cast<std::streamsize>(got));
        },
        [&](caf::error& err) {
          rc = report_request_error(s, err, exit_status::unavailable);
        });
    if (!answered)
      return rc;
    if (got > 0)
      continue;
    std::cout.flush();
    if (!opts.follow || complete || attempt == 0)
      return exit_status::ok;
    bool stop = false;
    s.self->receive([&](signal_atom, int) { stop = true; },
                    caf::after(std::chrono::milliseconds{250}) >> [] {});
    if (stop)
      return exit_status::ok;
  }
}

void setup_logs(CLI::App& app, int& status) {
  auto opts = std::make_shared<logs_options>();
  auto* cmd = app.add_subcommand(
    "logs", "Print the output of a task's attempt (the latest by default).");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  cmd
    ->add_option("--attempt", opts->attempt,
                 "Which attempt (1 is the first); default: the latest")
    ->check(CLI::PositiveNumber);
  cmd->add_flag("--follow,-f", opts->follow,
                "Keep printing as the attempt writes, until it ends");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Each line is as the agent wrote it (stdout and stderr interleaved, in the
order the node read them). Exit status: 0, or 3 when the node could not be
reached or does not know the task (or the attempt).

Examples:
  tasksup logs fix-login
  tasksup logs fix-login --attempt 1
  tasksup logs -f fix-login)");
  cmd->callback([opts, &status] {
    status = with_node("logs", opts->node, opts->follow,
                       [&](node_session& s) { return logs(s, *opts); });
  });
}

command_registrar wait_registrar{81, setup_wait};
command_registrar describe_registrar{82, setup_describe};
command_registrar logs_registrar{83, setup_logs};

} // namespace

} // namespace tasksup::app
