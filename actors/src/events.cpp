#include "tasksup/actors/events.hpp"

#include "json_writer.hpp"

#include "tasksup/supervisor/error_class.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

namespace tasksup {

namespace {

using detail::hex_chars;
using detail::json_writer;

std::string hex_digits(trace_id_generator& rng, int words) {
  std::string out(static_cast<std::size_t>(words) * 16, '0');
  for (;;) {
    bool nonzero = false;
    for (int i = 0; i < words; ++i) {
      auto x = rng.next();
      nonzero = nonzero || x != 0;
      auto* p = out.data() + i * 16;
      for (int d = 15; d >= 0; --d, x >>= 4)
        p[d] = hex_chars[x & 15];
    }
    if (nonzero)
      return out;
  }
}

/// Opens the event object and writes the common keys, in SPEC §9's order.
void head_fields(json_writer& w, std::string_view kind, const event_head& h) {
  w.begin_object();
  w.key("event");
  w.raw_string(kind);
  w.key("task_id");
  w.string(h.task_id);
  w.key("attempt");
  w.integer(h.attempt);
  w.key("trace_id");
  w.raw_string(h.trace_id);
  w.key("span_id");
  w.raw_string(h.span_id);
  w.key("ts");
  w.number(h.ts);
}

/// Closes the object and makes the event, with the kind's keys typed.
template<class Data>
event finish(event_kind kind, const event_head& h, json_writer& w,
             Data&& data) {
  w.end_object();
  event ev;
  ev.kind = kind;
  ev.task_id = h.task_id;
  ev.attempt = h.attempt;
  ev.trace_id = h.trace_id;
  ev.span_id = h.span_id;
  ev.ts = h.ts;
  ev.json = w.take();
  if (h.typed)
    ev.fields = std::make_shared<const event_fields>(
      event_fields{std::forward<Data>(data)});
  return ev;
}

std::optional<std::string>
optional_string(json_writer& w, const std::optional<std::string>& x) {
  if (x)
    return w.string_copy(*x);
  w.null();
  return std::nullopt;
}

/// The result's keys (inside an open object).
/// `usage` {`input_tokens`, `output_tokens`, `cached_input_tokens`} and
/// `cost_usd`, each only when known.
void usage_fields(json_writer& w, const std::optional<token_usage>& usage,
                  const std::optional<double>& cost_usd) {
  if (usage) {
    w.key("usage");
    w.begin_object();
    w.key("input_tokens");
    w.integer(usage->input_tokens);
    w.key("output_tokens");
    w.integer(usage->output_tokens);
    w.key("cached_input_tokens");
    w.integer(usage->cached_input_tokens);
    w.end_object();
  }
  if (cost_usd) {
    w.key("cost_usd");
    w.number(*cost_usd);
  }
}

/// Writes `r`'s keys and returns `r` with its strings as written.
task_result result_fields(json_writer& w, const task_result& r) {
  task_result typed;
  typed.task_id = r.task_id;
  typed.outcome = r.outcome;
  typed.exit_code = r.exit_code;
  typed.metadata = r.metadata;
  w.key("outcome");
  w.raw_string(to_string(r.outcome));
  w.key("exit_code");
  w.integer(r.exit_code);
  w.key("error");
  typed.error = optional_string(w, r.error);
  w.key("artifacts");
  w.begin_array();
  typed.artifacts.reserve(r.artifacts.size());
  for (auto& a : r.artifacts)
    typed.artifacts.push_back(w.string_copy(a));
  w.end_array();
  w.key("metadata");
  w.begin_object();
  w.key("agent_used");
  typed.metadata.agent_used = w.string_copy(r.metadata.agent_used);
  w.key("agent_id");
  typed.metadata.agent_id = w.string_copy(r.metadata.agent_id);
  w.key("retry_count");
  w.integer(r.metadata.retry_count);
  w.key("total_attempts");
  w.integer(r.metadata.total_attempts);
  w.key("fallback_count");
  w.integer(r.metadata.fallback_count);
  w.key("total_retries");
  w.integer(r.metadata.total_retries);
  w.key("retries_by_agent");
  w.begin_object();
  for (auto& [agent, n] : r.metadata.retries_by_agent) {
    w.key(agent); // agent ids are validated identifiers
    w.integer(n);
  }
  w.end_object();
  // Summed over the attempts whose structured output reported them.
  usage_fields(w, r.metadata.usage, r.metadata.cost_usd);
  w.end_object();
  return typed;
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
  json_writer w{h.typed};
  event_data::task_submitted d;
  head_fields(w, "task_submitted", h);
  w.key("environment");
  d.environment = w.string_copy(environment);
  w.key("agents");
  w.begin_array();
  d.agents.reserve(agents.size());
  for (auto& a : agents)
    d.agents.push_back(w.string_copy(a));
  w.end_array();
  return finish(event_kind::task_submitted, h, w, std::move(d));
}

event attempt_started_event(const event_head& h, std::string_view agent_id,
                            std::string_view agent_cli,
                            std::string_view container_id) {
  json_writer w{h.typed};
  event_data::attempt_started d;
  head_fields(w, "attempt_started", h);
  w.key("agent_id");
  d.agent_id = w.string_copy(agent_id);
  w.key("agent_cli");
  d.agent_cli = w.string_copy(agent_cli);
  w.key("container_id");
  d.container_id = w.string_copy(container_id);
  return finish(event_kind::attempt_started, h, w, std::move(d));
}

event log_event(const event_head& h, std::string_view line,
                std::string_view stream) {
  json_writer w{h.typed};
  event_data::log d;
  head_fields(w, "log", h);
  w.key("stream");
  d.stream = w.string_copy(stream);
  w.key("line");
  d.line = w.string_copy(line);
  return finish(event_kind::log, h, w, std::move(d));
}

event attempt_exited_event(const event_head& h, const attempt_outcome& out) {
  json_writer w{h.typed};
  event_data::attempt_exited d;
  d.exit_code = out.exit_code;
  d.signal = out.signal;
  d.oom_killed = out.oom_killed;
  d.duration_s = out.duration_s;
  d.started = out.started;
  head_fields(w, "attempt_exited", h);
  w.key("exit_code");
  w.integer(out.exit_code);
  w.key("signal");
  w.integer(out.signal);
  w.key("oom_killed");
  w.boolean(out.oom_killed);
  w.key("duration_s");
  w.number(out.duration_s);
  if (!out.infrastructure_error.empty()) {
    w.key("infrastructure_error");
    d.infrastructure_error = w.string_copy(out.infrastructure_error);
  }
  if (!out.started) {
    // Nothing ran: the exit code means nothing.
    w.key("started");
    w.boolean(false);
  }
  // What this attempt used, when its CLI's structured output said.
  if (out.structured) {
    usage_fields(w, out.structured->usage, out.structured->cost_usd);
    d.usage = out.structured->usage;
    d.cost_usd = out.structured->cost_usd;
  }
  return finish(event_kind::attempt_exited, h, w, std::move(d));
}

event classified_event(const event_head& h, const classification& c) {
  json_writer w{h.typed};
  event_data::classified d;
  d.c.cls = c.cls;
  d.c.retry_after_s = c.retry_after_s;
  head_fields(w, "classified", h);
  w.key("class");
  w.raw_string(to_string(c.cls));
  w.key("rule");
  d.c.rule = w.string_copy(c.rule);
  w.key("line");
  d.c.line = w.string_copy(c.line);
  w.key("retry_after_s");
  if (c.retry_after_s)
    w.number(*c.retry_after_s);
  else
    w.null();
  return finish(event_kind::classified, h, w, std::move(d));
}

event retry_scheduled_event(const event_head& h, int retry_count,
                            int max_retries, std::string_view agent,
                            const delay_decision& delay,
                            std::string_view reason) {
  json_writer w{h.typed};
  event_data::retry_scheduled d;
  d.retry_count = retry_count;
  d.max_retries = max_retries;
  d.delay = delay;
  head_fields(w, "retry_scheduled", h);
  w.key("retry_count");
  w.integer(retry_count);
  w.key("agent");
  d.agent = w.string_copy(agent);
  w.key("delay_s");
  w.number(delay.delay_s);
  w.key("max_retries");
  w.integer(max_retries);
  w.key("delay_source");
  w.raw_string(to_string(delay.source));
  w.key("scheduled_s");
  w.number(delay.scheduled_s);
  w.key("capped");
  w.boolean(delay.capped);
  w.key("reason");
  d.reason = w.string_copy(reason);
  return finish(event_kind::retry_scheduled, h, w, std::move(d));
}

event agent_switched_event(const event_head& h, std::string_view from,
                           std::string_view to, std::string_view reason) {
  json_writer w{h.typed};
  event_data::agent_switched d;
  head_fields(w, "agent_switched", h);
  w.key("from");
  d.from = w.string_copy(from);
  w.key("to");
  d.to = w.string_copy(to);
  w.key("reason");
  d.reason = w.string_copy(reason);
  return finish(event_kind::agent_switched, h, w, std::move(d));
}

event user_stop_event(const event_head& h, stop_mode mode,
                      std::string_view message) {
  json_writer w{h.typed};
  event_data::user_stop d;
  d.mode = mode;
  head_fields(w, "user_stop", h);
  w.key("mode");
  w.raw_string(to_string(mode));
  w.key("message");
  d.message = w.string_copy(message);
  return finish(event_kind::user_stop, h, w, std::move(d));
}

event task_done_event(const event_head& h, const task_result& r) {
  json_writer w{h.typed};
  head_fields(w, "task_done", h);
  event_data::task_done d{result_fields(w, r)};
  return finish(event_kind::task_done, h, w, std::move(d));
}

event escalated_event(const event_head& h, task_outcome outcome,
                      std::string_view parent) {
  json_writer w{h.typed};
  event_data::escalated d;
  d.outcome = outcome;
  head_fields(w, "escalated", h);
  w.key("outcome");
  w.raw_string(to_string(outcome));
  w.key("parent");
  d.parent = w.string_copy(parent);
  return finish(event_kind::escalated, h, w, std::move(d));
}

event warning_event(const event_head& h, std::string_view message) {
  json_writer w{h.typed};
  event_data::warning d;
  head_fields(w, "warning", h);
  w.key("message");
  d.message = w.string_copy(message);
  return finish(event_kind::warning, h, w, std::move(d));
}

event step_event(const event_head& h, std::string_view step,
                 std::string_view name, bool passed,
                 std::optional<int> exit_code, std::string_view message) {
  json_writer w{h.typed};
  event_data::step d;
  d.passed = passed;
  d.exit_code = exit_code;
  head_fields(w, "step", h);
  w.key("step");
  d.step = w.string_copy(step);
  w.key("name");
  d.name = w.string_copy(name);
  w.key("passed");
  w.boolean(passed);
  w.key("exit_code");
  if (exit_code)
    w.integer(*exit_code);
  else
    w.null();
  w.key("message");
  d.message = w.string_copy(message);
  return finish(event_kind::step, h, w, std::move(d));
}

std::string result_to_json(const task_result& r) {
  json_writer w{false};
  w.begin_object();
  result_fields(w, r);
  w.key("task_id");
  w.string(r.task_id);
  w.end_object();
  return w.take();
}

} // namespace tasksup
