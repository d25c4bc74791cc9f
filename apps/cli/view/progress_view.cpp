#include "progress_view.hpp"

#include "tasksup/supervisor/events.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <string_view>
#include <utility>
#include <variant>

namespace tasksup::app {

namespace {

/// The string at `key`, or `fallback` when absent or not a string.
std::string str(const boost::json::object& obj, std::string_view key,
                std::string fallback = {}) {
  if (auto* v = obj.if_contains(key); v && v->is_string())
    return std::string{v->get_string()};
  return fallback;
}

/// The number at `key` (integers too), or nullopt.
std::optional<double> num(const boost::json::object& obj,
                          std::string_view key) {
  auto* v = obj.if_contains(key);
  if (!v)
    return std::nullopt;
  if (v->is_double())
    return v->get_double();
  if (v->is_int64())
    return static_cast<double>(v->get_int64());
  if (v->is_uint64())
    return static_cast<double>(v->get_uint64());
  return std::nullopt;
}

/// Whether `key` holds `true`.
bool flag(const boost::json::object& obj, std::string_view key) {
  auto* v = obj.if_contains(key);
  return v && v->is_bool() && v->get_bool();
}

std::string integer(std::optional<double> x) {
  return x ? std::to_string(static_cast<long long>(*x)) : std::string{"?"};
}

/// Untrusted text (agent output, remote fields) made safe for a terminal:
/// control characters other than tab become `?`, so no escape sequence from
/// an agent can rewrite the screen.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text)
    out += (c < 0x20 && c != '\t') || c == 0x7f ? '?' : static_cast<char>(c);
  return out;
}

std::string quoted(std::string_view text) {
  constexpr std::size_t max_len = 200;
  auto body = printable(text.substr(0, max_len));
  if (text.size() > max_len)
    body += "...";
  return "\"" + body + "\"";
}

const char* bold = "1";
const char* red = "31";
const char* green = "32";
const char* yellow = "33";
const char* dim = "2";

} // namespace

progress_view::progress_view() : progress_view(options{}) {}

progress_view::progress_view(options opts) : opts_(opts) {}

std::string progress_view::paint(const char* code,
                                 const std::string& text) const {
  if (!opts_.color)
    return text;
  return std::string{"\x1b["} + code + "m" + text + "\x1b[0m";
}

namespace {

/// A value the JSON form spells `null` (NaN, infinities) is unknown there,
/// so it is unknown here too.
std::optional<double> finite(double x) {
  return std::isfinite(x) ? std::optional<double>{x} : std::nullopt;
}

/// " (1200 tokens in, 345 out, $0.0123)" from an attempt's token counts and
/// cost; empty when it gives neither. Values from another node are checked
/// before they are printed.
std::string usage_text(std::optional<double> in, std::optional<double> outp,
                       std::optional<double> cost) {
  auto count = [](std::optional<double> x) {
    return x && *x >= 0 && *x <= 1e15 ? x : std::nullopt;
  };
  in = count(in);
  outp = count(outp);
  std::string out;
  if (in && outp)
    out = integer(in) + " tokens in, " + integer(outp) + " out";
  if (cost && *cost >= 0 && *cost <= 1e9) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "$%.4f", *cost);
    out += (out.empty() ? "" : ", ") + std::string{buf};
  }
  return out.empty() ? out : " (" + out + ")";
}

/// An attempt's tokens and cost as its JSON `attempt_exited` gives them.
std::string usage_text(const boost::json::object& event) {
  std::optional<double> in;
  std::optional<double> outp;
  if (auto* u = event.if_contains("usage"); u && u->is_object()) {
    in = num(u->get_object(), "input_tokens");
    outp = num(u->get_object(), "output_tokens");
  }
  return usage_text(in, outp, num(event, "cost_usd"));
}

/// "5 (a: 2, b: 3)": the task's retries, and per agent (name and count as
/// text) when more than one agent retried.
std::string
retries_text(const std::string& total,
             const std::vector<std::pair<std::string, std::string>>& per) {
  if (per.size() < 2)
    return total;
  std::string parts;
  for (auto& [agent, n] : per) {
    if (!parts.empty())
      parts += ", ";
    parts += printable(agent) + ": " + n;
  }
  return total + " (" + parts + ")";
}

/// The same from a JSON `metadata`; older nodes report only the last
/// agent's retries.
std::string retries_text(const boost::json::object& m) {
  auto total = num(m, "total_retries");
  if (!total)
    return integer(num(m, "retry_count"));
  std::vector<std::pair<std::string, std::string>> per;
  if (auto* p = m.if_contains("retries_by_agent"); p && p->is_object())
    for (auto& [agent, n] : p->get_object())
      per.emplace_back(std::string{agent},
                       integer(n.is_number()
                                 ? std::optional<double>{n.to_number<double>()}
                                 : std::nullopt));
  return retries_text(integer(total), per);
}

/// How an attempt's place reads: the process runtime names it by its pid.
std::string attempt_place(std::string where) {
  if (!where.empty() &&
      where.find_first_not_of("0123456789") == std::string::npos)
    where = "pid " + where;
  return where.empty() ? where : ", " + printable(where);
}

/// "exited with code 1 (signal 9) (out of memory) after 2.5s".
/// An attempt that ended without an exit code of its own (its node was
/// lost, its worker never reported): what happened instead of "-1".
bool lost(double exit_code, const std::string& infrastructure_error) {
  return exit_code < 0 && !infrastructure_error.empty();
}

std::string lost_text(const std::string& attempt,
                      const std::string& infrastructure_error) {
  return "attempt " + attempt + " was lost: " + printable(infrastructure_error);
}

std::string exited_text(const std::string& attempt, const std::string& code,
                        std::optional<double> sig, bool oom,
                        std::optional<double> duration,
                        const std::string& usage) {
  std::string text = "attempt " + attempt + " exited with code " + code;
  if (sig && *sig > 0)
    text += " (signal " + integer(sig) + ")";
  if (oom)
    text += " (out of memory)";
  if (duration)
    text += " after " + human_duration(*duration);
  return text + usage;
}

} // namespace

std::string progress_view::prefix(std::optional<double> ts,
                                  const std::string& task_id) const {
  std::string out;
  if (opts_.show_time && ts && *ts > 0 && *ts < 1e11) {
    auto t = static_cast<std::time_t>(*ts);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    out += buf;
  }
  if (opts_.prefix_task)
    out += "[" + printable(task_id) + "] ";
  return out;
}

void progress_view::started(std::vector<std::string>& out,
                            const std::string& pre, const std::string& attempt,
                            const std::string& agent, const std::string& cli,
                            std::string where) {
  pending_.reset();
  running_ = "attempt " + attempt + ": " + printable(agent);
  out.push_back(pre + "attempt " + attempt + ": " +
                paint(bold, printable(agent)) + " (" + printable(cli) +
                ") started" + attempt_place(std::move(where)));
}

std::string progress_view::classified(const std::string& cls,
                                      const std::string& rule,
                                      const std::string& line,
                                      std::optional<double> hint) const {
  std::string text = "classified as " + paint(yellow, printable(cls)) +
                     " by rule " + printable(rule);
  if (!line.empty())
    text += ": " + quoted(line);
  if (hint)
    text += " (retry after " + human_duration(*hint) + ")";
  return text;
}

void progress_view::retrying(std::vector<std::string>& out,
                             const std::string& pre, const std::string& task_id,
                             const std::string& n, const std::string& max,
                             const std::string& agent, double delay,
                             int restart, double ran_s, bool stable) {
  auto label =
    restart > 0
      ? "restarting (" +
          restart_words(static_cast<std::size_t>(restart), ran_s, stable) + ")"
      : "retrying (" + n + (max.empty() ? "" : "/" + max) + ")";
  out.push_back(pre + paint(yellow, label) + " " + printable(agent) + " in " +
                human_duration(delay));
  pending_ = pending_retry{task_id, label, delay};
}

void progress_view::switched(std::vector<std::string>& out,
                             const std::string& pre, const std::string& from,
                             const std::string& to, std::string reason) {
  pending_.reset();
  // The decision's words say why (breaker open, retry budget, retries
  // exhausted, forced by the user); the line already names the new agent.
  if (auto cut = reason.rfind("; switching to agent"); cut != std::string::npos)
    reason.erase(cut);
  out.push_back(pre + paint(yellow, "switching agent") + ": " +
                printable(from) + " -> " + printable(to) +
                (reason.empty() ? "" : " (" + printable(reason) + ")"));
}

void progress_view::stopped(std::vector<std::string>& out,
                            const std::string& pre, const std::string& mode,
                            const std::string& message) {
  pending_.reset();
  auto head = "user_" + printable(mode) + " requested";
  out.push_back(pre + paint(red, head));
  if (!message.empty() && message != head)
    out.push_back(pre + printable(message));
}

std::string progress_view::step_line(bool passed, const std::string& step,
                                     const std::string& name,
                                     const std::string& message) const {
  std::string head = printable(step);
  if (!name.empty())
    head += " " + printable(name);
  return paint(passed ? green : yellow, head) + ": " + printable(message);
}

void progress_view::done(std::vector<std::string>& out, const std::string& pre,
                         const done_text& d) {
  pending_.reset();
  const char* colour = d.outcome == "succeeded" ? green : red;
  std::string head = paint(colour, paint(bold, "task " + printable(d.outcome)));
  // -1: no attempt ran, or the last one never started.
  auto code_text = d.exit_code && *d.exit_code >= 0
                     ? " (exit code " + integer(d.exit_code) + ")"
                     : "";
  out.push_back(pre + head + code_text +
                (d.error.empty() ? "" : ": " + printable(d.error)));
  if (d.summary)
    out.push_back(pre + *d.summary);
  if (d.duration_s)
    out.push_back(pre + "  duration: " + human_duration(*d.duration_s));
  if (d.list_artifacts) {
    out.push_back(pre + "  artifacts:");
    for (auto& a : d.artifacts)
      out.push_back(pre + "    " + printable(a));
  }
  if (!d.log_dir.empty())
    out.push_back(pre + "  logs: " + printable(d.log_dir));
}

std::string progress_view::summary(const std::string& agent_used,
                                   const std::string& agent_id,
                                   const std::string& attempts,
                                   const std::string& retries,
                                   const std::string& fallbacks) {
  return "  agent used: " + printable(agent_used) + " (" + printable(agent_id) +
         ")" + ", attempts: " + attempts + ", retries: " + retries +
         ", fallbacks: " + fallbacks;
}

std::vector<std::string>
progress_view::render(const boost::json::object& event) {
  std::vector<std::string> out;
  auto kind = str(event, "event");
  auto pre = prefix(num(event, "ts"), str(event, "task_id", "?"));
  auto attempt = integer(num(event, "attempt"));
  if (kind == "attempt_exited" || kind == "task_done")
    running_.reset();
  if (kind == "task_submitted") {
    auto id = str(event, "task_id", "?");
    out.push_back(pre + paint(bold, "task " + printable(id)) + " submitted");
  } else if (kind == "attempt_started") {
    started(out, pre, attempt, str(event, "agent_id", "?"),
            str(event, "agent_cli", "?"), str(event, "container_id"));
  } else if (kind == "log") {
    if (opts_.show_output)
      out.push_back(pre + paint(dim, "  | " + printable(str(event, "line"))));
  } else if (kind == "attempt_exited" &&
             event.if_contains("started") != nullptr &&
             event.at("started").is_bool() && !event.at("started").get_bool()) {
    // Nothing ran: there is no exit code to speak of.
    out.push_back(pre + "attempt " + attempt + " could not start: " +
                  printable(str(event, "infrastructure_error", "?")));
  } else if (kind == "attempt_exited" &&
             lost(num(event, "exit_code").value_or(0),
                  str(event, "infrastructure_error"))) {
    out.push_back(pre + lost_text(attempt, str(event, "infrastructure_error")));
  } else if (kind == "attempt_exited") {
    auto* oom = event.if_contains("oom_killed");
    out.push_back(pre + exited_text(attempt, integer(num(event, "exit_code")),
                                    num(event, "signal"),
                                    oom && oom->is_bool() && oom->get_bool(),
                                    num(event, "duration_s"),
                                    usage_text(event)));
  } else if (kind == "classified") {
    out.push_back(pre + classified(str(event, "class", "?"),
                                   str(event, "rule", "?"), str(event, "line"),
                                   num(event, "retry_after_s")));
  } else if (kind == "retry_scheduled") {
    auto max = num(event, "max_retries");
    retrying(out, pre, str(event, "task_id"),
             integer(num(event, "retry_count")), max ? integer(max) : "",
             str(event, "agent", "?"), num(event, "delay_s").value_or(0),
             static_cast<int>(num(event, "restart").value_or(0)),
             num(event, "ran_s").value_or(0), flag(event, "stable"));
  } else if (kind == "agent_switched") {
    switched(out, pre, str(event, "from", "?"), str(event, "to", "?"),
             str(event, "reason"));
  } else if (kind == "user_stop") {
    stopped(out, pre, str(event, "mode", "cancel"), str(event, "message"));
  } else if (kind == "warning") {
    out.push_back(pre + paint(yellow, "warning: ") +
                  printable(str(event, "message")));
  } else if (kind == "step") {
    // Preflight, gates, delivery, worktree, attempt timeout, voluntary end.
    auto passed = event.if_contains("passed") != nullptr &&
                  event.at("passed").is_bool() && event.at("passed").get_bool();
    out.push_back(pre + step_line(passed, str(event, "step", "step"),
                                  str(event, "name"), str(event, "message")));
  } else if (kind == "group") {
    std::vector<std::string> members;
    if (auto* ms = event.if_contains("members"); ms && ms->is_array())
      for (auto& m : ms->get_array())
        if (m.is_string())
          members.emplace_back(m.get_string());
    group(out, pre, str(event, "change"), str(event, "member"),
          str(event, "how"), members, num(event, "restarts").value_or(0),
          str(event, "outcome"));
  } else if (kind == "task_done") {
    done_text d;
    d.outcome = str(event, "outcome", "?");
    d.exit_code = num(event, "exit_code");
    d.error = str(event, "error");
    if (auto* md = event.if_contains("metadata"); md && md->is_object()) {
      auto& m = md->get_object();
      d.summary = summary(str(m, "agent_used", "-"), str(m, "agent_id", "-"),
                          integer(num(m, "total_attempts")), retries_text(m),
                          integer(num(m, "fallback_count")));
    }
    d.duration_s = num(event, "duration_s");
    if (auto* arts = event.if_contains("artifacts"); arts && arts->is_array()) {
      d.list_artifacts = !arts->get_array().empty();
      for (auto& a : arts->get_array())
        if (a.is_string())
          d.artifacts.emplace_back(a.get_string());
    }
    d.log_dir = str(event, "log_dir");
    done(out, pre, d);
  }
  return out;
}

void progress_view::group(std::vector<std::string>& out, const std::string& pre,
                          const std::string& change, const std::string& member,
                          const std::string& how,
                          const std::vector<std::string>& members,
                          double restarts, const std::string& outcome) const {
  auto name = "'" + printable(member) + "'";
  if (change == "started") {
    out.push_back(pre + "group started: every member runs");
  } else if (change == "member_started") {
    out.push_back(pre + "member " + name + " started");
  } else if (change == "member_start_failed") {
    out.push_back(pre + paint(red, "member " + name + " could not start"));
  } else if (change == "member_skipped") {
    out.push_back(pre + paint(yellow, "step " + name + " skipped: '" +
                                        printable(how) + "' did not succeed"));
  } else if (change == "member_ended") {
    auto line = "member " + name + " ended: " + printable(how);
    out.push_back(pre + (how == "failed" ? paint(red, line) : line));
  } else if (change == "restart") {
    std::string list;
    for (auto& m : members)
      list += (list.empty() ? "" : ", ") + printable(m);
    out.push_back(pre + paint(yellow, "restarting " + list) + " (restart " +
                  integer(restarts) + ", after " + name + " ended " +
                  printable(how) + ")");
  } else if (change == "ended") {
    // A best-of-N step's race names its winner.
    auto line =
      "group ended: " + (how == "won" ? "won by " + name : printable(how));
    if (!member.empty() && how != "won")
      line += " (" + name + ")";
    line += ", " + printable(outcome.empty() ? std::string{"?"} : outcome);
    if (restarts > 0)
      line +=
        ", " + integer(restarts) + " restart" + (restarts == 1 ? "" : "s");
    out.push_back(pre + paint(outcome == "succeeded" ? green : red, line));
  }
}

std::vector<std::string> progress_view::render(const event& ev,
                                               const extra& more) {
  if (!ev.fields()) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(ev.json(), ec);
    if (ec || !doc.is_object())
      return {};
    auto& obj = doc.get_object();
    if (ev.kind == event_kind::task_done) {
      if (more.duration_s)
        obj["duration_s"] = *more.duration_s;
      if (!more.log_dir.empty())
        obj["log_dir"] = more.log_dir;
    }
    return render(obj);
  }
  std::vector<std::string> out;
  auto pre = prefix(finite(ev.ts), ev.task_id);
  auto attempt = std::to_string(ev.attempt);
  if (ev.kind == event_kind::attempt_exited || ev.kind == event_kind::task_done)
    running_.reset();
  auto& data = ev.fields()->data;
  if (std::holds_alternative<event_data::task_submitted>(data)) {
    out.push_back(pre + paint(bold, "task " + printable(ev.task_id)) +
                  " submitted");
  } else if (auto* s = std::get_if<event_data::attempt_started>(&data)) {
    started(out, pre, attempt, s->agent_id, s->agent_cli, s->container_id);
  } else if (auto* l = std::get_if<event_data::log>(&data)) {
    if (opts_.show_output)
      out.push_back(pre + paint(dim, "  | " + printable(l->line)));
  } else if (auto* x = std::get_if<event_data::attempt_exited>(&data)) {
    if (!x->started) {
      out.push_back(pre + "attempt " + attempt + " could not start: " +
                    printable(x->infrastructure_error.empty()
                                ? std::string{"?"}
                                : x->infrastructure_error));
    } else if (lost(x->exit_code, x->infrastructure_error)) {
      out.push_back(pre + lost_text(attempt, x->infrastructure_error));
    } else {
      std::optional<double> in;
      std::optional<double> outp;
      if (x->usage) {
        in = static_cast<double>(x->usage->input_tokens);
        outp = static_cast<double>(x->usage->output_tokens);
      }
      std::optional<double> cost;
      if (x->cost_usd)
        cost = finite(*x->cost_usd);
      out.push_back(pre + exited_text(attempt, std::to_string(x->exit_code),
                                      static_cast<double>(x->signal),
                                      x->oom_killed, finite(x->duration_s),
                                      usage_text(in, outp, cost)));
    }
  } else if (auto* c = std::get_if<event_data::classified>(&data)) {
    std::optional<double> hint;
    if (c->c.retry_after_s)
      hint = finite(*c->c.retry_after_s);
    out.push_back(pre + classified(std::string{to_string(c->c.cls)}, c->c.rule,
                                   c->c.line, hint));
  } else if (auto* r = std::get_if<event_data::retry_scheduled>(&data)) {
    retrying(out, pre, ev.task_id, std::to_string(r->retry_count),
             std::to_string(r->max_retries), r->agent,
             finite(r->delay.delay_s).value_or(0), r->restart,
             finite(r->ran_s).value_or(0), r->stable);
  } else if (auto* a = std::get_if<event_data::agent_switched>(&data)) {
    switched(out, pre, a->from, a->to, a->reason);
  } else if (auto* u = std::get_if<event_data::user_stop>(&data)) {
    stopped(out, pre, std::string{to_string(u->mode)}, u->message);
  } else if (auto* w = std::get_if<event_data::warning>(&data)) {
    out.push_back(pre + paint(yellow, "warning: ") + printable(w->message));
  } else if (auto* st = std::get_if<event_data::step>(&data)) {
    out.push_back(pre + step_line(st->passed, st->step, st->name, st->message));
  } else if (auto* g = std::get_if<event_data::group>(&data)) {
    group(out, pre, g->change, g->member, g->how, g->members,
          static_cast<double>(g->restarts), g->outcome);
  } else if (auto* t = std::get_if<event_data::task_done>(&data)) {
    auto& r = t->result();
    auto& m = r.metadata;
    done_text d;
    d.outcome = to_string(r.outcome);
    d.exit_code = static_cast<double>(r.exit_code);
    d.error = r.error.value_or("");
    std::vector<std::pair<std::string, std::string>> per;
    for (auto& [agent, n] : m.retries_by_agent)
      per.emplace_back(agent, std::to_string(n));
    d.summary =
      summary(m.agent_used, m.agent_id, std::to_string(m.total_attempts),
              retries_text(std::to_string(m.total_retries), per),
              std::to_string(m.fallback_count));
    if (more.duration_s)
      d.duration_s = finite(*more.duration_s);
    d.artifacts = r.artifacts;
    d.list_artifacts = !r.artifacts.empty();
    d.log_dir = more.log_dir;
    done(out, pre, d);
  }
  return out;
}

} // namespace tasksup::app
