#include "progress_view.hpp"

#include <boost/json/value.hpp>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <string_view>

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

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    seconds = 0;
  char buf[32];
  if (seconds < 1.0 && seconds > 0) {
    std::snprintf(buf, sizeof(buf), "%.0fms", seconds * 1000);
  } else if (seconds < 10 && seconds != std::floor(seconds)) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
  } else if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.0fs", std::round(seconds));
  } else if (seconds < 3600) {
    auto s = static_cast<long long>(std::llround(seconds));
    if (s % 60 == 0)
      std::snprintf(buf, sizeof(buf), "%lldm", s / 60);
    else
      std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    auto m = static_cast<long long>(std::llround(seconds / 60));
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", m / 60, m % 60);
  }
  return buf;
}

progress_view::progress_view() : progress_view(options{}) {}

progress_view::progress_view(options opts) : opts_(opts) {}

std::string progress_view::prefix(const boost::json::object& event) const {
  std::string out;
  if (opts_.show_time)
    if (auto ts = num(event, "ts"); ts && *ts > 0 && *ts < 1e11) {
      auto t = static_cast<std::time_t>(*ts);
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[32];
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ ", &tm);
      out += buf;
    }
  if (opts_.prefix_task)
    out += "[" + printable(str(event, "task_id", "?")) + "] ";
  return out;
}

std::string progress_view::paint(const char* code,
                                 const std::string& text) const {
  if (!opts_.color)
    return text;
  return std::string{"\x1b["} + code + "m" + text + "\x1b[0m";
}

namespace {

/// An attempt's tokens and cost as its `attempt_exited` event gives them:
/// " (1200 tokens in, 345 out, $0.0123)"; empty when it gives neither.
/// Values from another node are checked before they are printed.
std::string usage_text(const boost::json::object& event) {
  auto count = [](const boost::json::object& u, std::string_view key) {
    auto x = num(u, key);
    return x && *x >= 0 && *x <= 1e15 ? x : std::nullopt;
  };
  std::string out;
  if (auto* u = event.if_contains("usage"); u && u->is_object()) {
    auto in = count(u->get_object(), "input_tokens");
    auto outp = count(u->get_object(), "output_tokens");
    if (in && outp)
      out = integer(in) + " tokens in, " + integer(outp) + " out";
  }
  if (auto cost = num(event, "cost_usd"); cost && *cost >= 0 && *cost <= 1e9) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "$%.4f", *cost);
    out += (out.empty() ? "" : ", ") + std::string{buf};
  }
  return out.empty() ? out : " (" + out + ")";
}

/// The task's retries, and per agent when more than one agent retried:
/// "5 (a: 2, b: 3)". Older nodes report only the last agent's.
std::string retries_text(const boost::json::object& m) {
  auto total = num(m, "total_retries");
  if (!total)
    return integer(num(m, "retry_count"));
  auto out = integer(total);
  auto* per = m.if_contains("retries_by_agent");
  if (per == nullptr || !per->is_object() || per->get_object().size() < 2)
    return out;
  std::string parts;
  for (auto& [agent, n] : per->get_object()) {
    if (!parts.empty())
      parts += ", ";
    parts +=
      printable(agent) + ": " +
      integer(n.is_number() ? std::optional<double>{n.to_number<double>()}
                            : std::nullopt);
  }
  return out + " (" + parts + ")";
}

} // namespace

std::vector<std::string>
progress_view::render(const boost::json::object& event) {
  std::vector<std::string> out;
  auto kind = str(event, "event");
  auto pre = prefix(event);
  auto attempt = integer(num(event, "attempt"));
  if (kind == "attempt_exited" || kind == "task_done")
    running_.reset();
  if (kind == "task_submitted") {
    auto id = str(event, "task_id", "?");
    out.push_back(pre + paint(bold, "task " + printable(id)) + " submitted");
  } else if (kind == "attempt_started") {
    pending_.reset();
    running_ =
      "attempt " + attempt + ": " + printable(str(event, "agent_id", "?"));
    auto where = str(event, "container_id");
    // The process runtime names an attempt by its pid; say so.
    if (!where.empty() &&
        where.find_first_not_of("0123456789") == std::string::npos)
      where = "pid " + where;
    out.push_back(pre + "attempt " + attempt + ": " +
                  paint(bold, printable(str(event, "agent_id", "?"))) + " (" +
                  printable(str(event, "agent_cli", "?")) + ") started" +
                  (where.empty() ? "" : ", " + printable(where)));
  } else if (kind == "log") {
    if (opts_.show_output)
      out.push_back(pre + paint(dim, "  | " + printable(str(event, "line"))));
  } else if (kind == "attempt_exited" &&
             event.if_contains("started") != nullptr &&
             event.at("started").is_bool() && !event.at("started").get_bool()) {
    // Nothing ran: there is no exit code to speak of.
    out.push_back(pre + "attempt " + attempt + " could not start: " +
                  printable(str(event, "infrastructure_error", "?")));
  } else if (kind == "attempt_exited") {
    std::string text = "attempt " + attempt + " exited with code " +
                       integer(num(event, "exit_code"));
    if (auto sig = num(event, "signal"); sig && *sig > 0)
      text += " (signal " + integer(sig) + ")";
    if (auto* oom = event.if_contains("oom_killed");
        oom && oom->is_bool() && oom->get_bool())
      text += " (out of memory)";
    if (auto d = num(event, "duration_s"))
      text += " after " + human_duration(*d);
    text += usage_text(event);
    out.push_back(pre + text);
  } else if (kind == "classified") {
    auto cls = str(event, "class", "?");
    std::string text = "classified as " + paint(yellow, printable(cls)) +
                       " by rule " + printable(str(event, "rule", "?"));
    auto line = str(event, "line");
    if (!line.empty())
      text += ": " + quoted(line);
    if (auto hint = num(event, "retry_after_s"))
      text += " (retry after " + human_duration(*hint) + ")";
    out.push_back(pre + text);
  } else if (kind == "retry_scheduled") {
    auto n = integer(num(event, "retry_count"));
    auto max = num(event, "max_retries");
    auto label = "retrying (" + n + (max ? "/" + integer(max) : "") + ")";
    auto delay = num(event, "delay_s").value_or(0);
    out.push_back(pre + paint(yellow, label) + " " +
                  printable(str(event, "agent", "?")) + " in " +
                  human_duration(delay));
    pending_ = pending_retry{str(event, "task_id"), label, delay};
  } else if (kind == "agent_switched") {
    pending_.reset();
    out.push_back(pre + paint(yellow, "switching agent") + ": " +
                  printable(str(event, "from", "?")) + " -> " +
                  printable(str(event, "to", "?")));
  } else if (kind == "user_stop") {
    pending_.reset();
    auto mode = str(event, "mode", "cancel");
    auto head = "user_" + printable(mode) + " requested";
    out.push_back(pre + paint(red, head));
    auto message = str(event, "message");
    if (!message.empty() && message != head)
      out.push_back(pre + printable(message));
  } else if (kind == "warning") {
    out.push_back(pre + paint(yellow, "warning: ") +
                  printable(str(event, "message")));
  } else if (kind == "step") {
    // Preflight, gates, delivery, worktree, attempt timeout, voluntary end.
    auto passed = event.if_contains("passed") != nullptr &&
                  event.at("passed").is_bool() && event.at("passed").get_bool();
    auto name = str(event, "name");
    std::string head = printable(str(event, "step", "step"));
    if (!name.empty())
      head += " " + printable(name);
    out.push_back(pre + paint(passed ? green : yellow, head) + ": " +
                  printable(str(event, "message")));
  } else if (kind == "task_done") {
    pending_.reset();
    auto outcome = str(event, "outcome", "?");
    const char* colour = outcome == "succeeded" ? green : red;
    std::string head = paint(colour, paint(bold, "task " + printable(outcome)));
    auto code = num(event, "exit_code");
    auto error = str(event, "error");
    // -1: no attempt ran, or the last one never started.
    auto code_text =
      code && *code >= 0 ? " (exit code " + integer(code) + ")" : "";
    out.push_back(pre + head + code_text +
                  (error.empty() ? "" : ": " + printable(error)));
    if (auto* md = event.if_contains("metadata"); md && md->is_object()) {
      auto& m = md->get_object();
      out.push_back(pre +
                    "  agent used: " + printable(str(m, "agent_used", "-")) +
                    " (" + printable(str(m, "agent_id", "-")) + ")" +
                    ", attempts: " + integer(num(m, "total_attempts")) +
                    ", retries: " + retries_text(m) +
                    ", fallbacks: " + integer(num(m, "fallback_count")));
    }
    if (auto d = num(event, "duration_s"))
      out.push_back(pre + "  duration: " + human_duration(*d));
    if (auto* arts = event.if_contains("artifacts");
        arts && arts->is_array() && !arts->get_array().empty()) {
      out.push_back(pre + "  artifacts:");
      for (auto& a : arts->get_array())
        if (a.is_string())
          out.push_back(pre + "    " + printable(a.get_string()));
    }
    auto logs = str(event, "log_dir");
    if (!logs.empty())
      out.push_back(pre + "  logs: " + printable(logs));
  }
  return out;
}

} // namespace tasksup::app
