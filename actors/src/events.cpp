#include "tasksup/actors/events.hpp"

#include "supervisor/error_class.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdio>
#include <utility>

namespace tasksup {

namespace {

std::string hex_digits(trace_id_generator& rng, int words) {
  std::string out;
  for (;;) {
    out.clear();
    bool nonzero = false;
    for (int i = 0; i < words; ++i) {
      auto x = rng.next();
      nonzero = nonzero || x != 0;
      char buf[17];
      std::snprintf(buf, sizeof(buf), "%016llx",
                    static_cast<unsigned long long>(x));
      out.append(buf, 16);
    }
    if (nonzero)
      return out;
  }
}

boost::json::string str(std::string_view s) {
  return boost::json::string{sanitize_utf8(s)};
}

/// The common keys, in SPEC §9's order.
boost::json::object head_object(std::string_view kind, const event_head& h) {
  boost::json::object obj;
  obj["event"] = kind;
  obj["task_id"] = str(h.task_id);
  obj["attempt"] = h.attempt;
  obj["trace_id"] = h.trace_id;
  obj["span_id"] = h.span_id;
  obj["ts"] = h.ts;
  return obj;
}

event finish(event_kind kind, const event_head& h,
             const boost::json::object& obj) {
  event ev;
  ev.kind = kind;
  ev.task_id = h.task_id;
  ev.attempt = h.attempt;
  ev.trace_id = h.trace_id;
  ev.span_id = h.span_id;
  ev.ts = h.ts;
  ev.json = boost::json::serialize(obj);
  return ev;
}

boost::json::value optional_string(const std::optional<std::string>& x) {
  if (x)
    return str(*x);
  return nullptr;
}

boost::json::object result_fields(const task_result& r) {
  boost::json::object obj;
  obj["outcome"] = to_string(r.outcome);
  obj["exit_code"] = r.exit_code;
  obj["error"] = optional_string(r.error);
  boost::json::array artifacts;
  for (auto& a : r.artifacts)
    artifacts.emplace_back(str(a));
  obj["artifacts"] = std::move(artifacts);
  boost::json::object meta;
  meta["agent_used"] = str(r.metadata.agent_used);
  meta["agent_id"] = str(r.metadata.agent_id);
  meta["retry_count"] = r.metadata.retry_count;
  meta["total_attempts"] = r.metadata.total_attempts;
  meta["fallback_count"] = r.metadata.fallback_count;
  obj["metadata"] = std::move(meta);
  return obj;
}

} // namespace

trace_id_generator::trace_id_generator(std::uint64_t seed) : state_(seed) {}

std::uint64_t trace_id_generator::next() {
  auto z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string trace_id_generator::trace_id() {
  return hex_digits(*this, 2);
}

std::string trace_id_generator::span_id() {
  return hex_digits(*this, 1);
}

std::uint64_t trace_id_generator::child_seed() {
  return next();
}

double wall_clock_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

event task_submitted_event(const event_head& h, std::string_view environment,
                           const std::vector<std::string>& agents) {
  auto obj = head_object("task_submitted", h);
  obj["environment"] = str(environment);
  boost::json::array ids;
  for (auto& a : agents)
    ids.emplace_back(str(a));
  obj["agents"] = std::move(ids);
  return finish(event_kind::task_submitted, h, obj);
}

event attempt_started_event(const event_head& h, std::string_view agent_id,
                            std::string_view agent_cli,
                            std::string_view container_id) {
  auto obj = head_object("attempt_started", h);
  obj["agent_id"] = str(agent_id);
  obj["agent_cli"] = str(agent_cli);
  obj["container_id"] = str(container_id);
  return finish(event_kind::attempt_started, h, obj);
}

event log_event(const event_head& h, std::string_view line) {
  auto obj = head_object("log", h);
  obj["line"] = str(line);
  return finish(event_kind::log, h, obj);
}

event attempt_exited_event(const event_head& h, const attempt_outcome& out) {
  auto obj = head_object("attempt_exited", h);
  obj["exit_code"] = out.exit_code;
  obj["signal"] = out.signal;
  obj["oom_killed"] = out.oom_killed;
  obj["duration_s"] = out.duration_s;
  if (!out.infrastructure_error.empty())
    obj["infrastructure_error"] = str(out.infrastructure_error);
  return finish(event_kind::attempt_exited, h, obj);
}

event classified_event(const event_head& h, const classification& c) {
  auto obj = head_object("classified", h);
  obj["class"] = to_string(c.cls);
  obj["rule"] = str(c.rule);
  obj["line"] = str(c.line);
  if (c.retry_after_s)
    obj["retry_after_s"] = *c.retry_after_s;
  else
    obj["retry_after_s"] = nullptr;
  return finish(event_kind::classified, h, obj);
}

event retry_scheduled_event(const event_head& h, int retry_count,
                            int max_retries, std::string_view agent,
                            double delay_s) {
  auto obj = head_object("retry_scheduled", h);
  obj["retry_count"] = retry_count;
  obj["agent"] = str(agent);
  obj["delay_s"] = delay_s;
  obj["max_retries"] = max_retries;
  return finish(event_kind::retry_scheduled, h, obj);
}

event agent_switched_event(const event_head& h, std::string_view from,
                           std::string_view to, std::string_view reason) {
  auto obj = head_object("agent_switched", h);
  obj["from"] = str(from);
  obj["to"] = str(to);
  obj["reason"] = str(reason);
  return finish(event_kind::agent_switched, h, obj);
}

event user_stop_event(const event_head& h, stop_mode mode,
                      std::string_view message) {
  auto obj = head_object("user_stop", h);
  obj["mode"] = to_string(mode);
  obj["message"] = str(message);
  return finish(event_kind::user_stop, h, obj);
}

event task_done_event(const event_head& h, const task_result& r) {
  auto obj = head_object("task_done", h);
  for (auto& kv : result_fields(r))
    obj[kv.key()] = kv.value();
  return finish(event_kind::task_done, h, obj);
}

event escalated_event(const event_head& h, task_outcome outcome,
                      std::string_view parent) {
  auto obj = head_object("escalated", h);
  obj["outcome"] = to_string(outcome);
  obj["parent"] = str(parent);
  return finish(event_kind::escalated, h, obj);
}

event warning_event(const event_head& h, std::string_view message) {
  auto obj = head_object("warning", h);
  obj["message"] = str(message);
  return finish(event_kind::warning, h, obj);
}

std::string result_to_json(const task_result& r) {
  auto obj = result_fields(r);
  obj["task_id"] = str(r.task_id);
  return boost::json::serialize(obj);
}

std::string sanitize_utf8(std::string_view s) {
  // Validates per RFC 3629: no overlongs, no surrogates, nothing above
  // U+10FFFF. Each maximal invalid subpart becomes one U+FFFD.
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = byte(i);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0)
        lo = 0xA0;
      else if (c == 0xED)
        hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0)
        lo = 0x90;
      else if (c == 0xF4)
        hi = 0x8F;
    }
    if (len == 0) {
      out.append(replacement);
      ++i;
      continue;
    }
    std::size_t j = 1;
    for (; j < len && i + j < s.size(); ++j) {
      auto b = byte(i + j);
      auto min = j == 1 ? lo : static_cast<unsigned char>(0x80);
      auto max = j == 1 ? hi : static_cast<unsigned char>(0xBF);
      if (b < min || b > max)
        break;
    }
    if (j == len) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append(replacement);
      i += j;
    }
  }
  return out;
}

} // namespace tasksup
