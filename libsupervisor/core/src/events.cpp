#include "tasksup/supervisor/events.hpp"

#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/json_writer.hpp"
#include "tasksup/supervisor/text.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <variant>

namespace tasksup {

/// Defined here, opaque elsewhere (task_model.hpp): the typed keys, the ids,
/// and the JSON line once rendered.
class event_body {
public:
  /// A body built in this process: typed, rendered on first use.
  event_body(std::string_view trace_id, std::string_view span_id,
             event_fields fields)
    : typed_(std::move(fields)) {
    set_ids(trace_id, span_id);
  }

  /// A body that arrived as its JSON line.
  event_body(std::string_view trace_id, std::string_view span_id,
             std::string json)
    : rendered_(true), json_(std::move(json)) {
    set_ids(trace_id, span_id);
  }

  /// The JSON line of `ev` (whose body this is): rendered by the first
  /// caller, under the lock, and read without it from then on.
  const std::string& json(const event& ev) const {
    if (!rendered_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> guard{mtx_};
      if (!rendered_.load(std::memory_order_relaxed)) {
        json_ = render(ev);
        rendered_.store(true, std::memory_order_release);
      }
    }
    return json_;
  }

  const event_fields* fields() const noexcept {
    return typed_ ? &*typed_ : nullptr;
  }

  std::string_view trace_id() const noexcept { return {ids(), trace_n_}; }

  std::string_view span_id() const noexcept {
    return {ids() + trace_n_, span_n_};
  }

private:
  /// Room for W3C-sized ids (32 + 16 digits) without an allocation.
  static constexpr std::size_t inline_ids = 48;

  void set_ids(std::string_view trace_id, std::string_view span_id) {
    trace_n_ = trace_id.size();
    span_n_ = span_id.size();
    char* out = inline_;
    if (trace_n_ + span_n_ > inline_ids) {
      long_ids_.resize(trace_n_ + span_n_);
      out = long_ids_.data();
    }
    if (trace_n_ > 0)
      std::memcpy(out, trace_id.data(), trace_n_);
    if (span_n_ > 0)
      std::memcpy(out + trace_n_, span_id.data(), span_n_);
  }

  const char* ids() const noexcept {
    return long_ids_.empty() ? inline_ : long_ids_.data();
  }

  std::string render(const event& ev) const;

  std::optional<event_fields> typed_;
  char inline_[inline_ids];
  std::size_t trace_n_ = 0;
  std::size_t span_n_ = 0;
  std::string long_ids_;
  mutable std::atomic<bool> rendered_{false};
  mutable std::mutex mtx_;
  mutable std::string json_;
};

namespace {

using detail::hex_chars;

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

/// `s` with invalid UTF-8 repaired: untrusted text as an event keeps it.
std::string checked_text(std::string_view s) {
  return valid_utf8(s) ? std::string{s} : sanitize_utf8(s);
}

/// Repairs `s` in place (a copy only when it was invalid).
void repair_text(std::string& s) {
  if (!valid_utf8(s))
    s = sanitize_utf8(s);
}

/// Opens the event object and writes the common keys, in the order of
/// docs/BEHAVIOUR.md, Events.
void head_fields(json_writer& w, const event& ev, std::string_view trace_id,
                 std::string_view span_id) {
  w.begin_object();
  w.key("event");
  w.raw_string(to_string(ev.kind));
  w.key("task_id");
  w.string(ev.task_id);
  w.key("attempt");
  w.integer(ev.attempt);
  w.key("trace_id");
  w.raw_string(trace_id);
  w.key("span_id");
  w.raw_string(span_id);
  w.key("ts");
  w.number(ev.ts);
}

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

/// `r` with its untrusted text repaired, as `task_done` keeps it.
task_result checked_result(const task_result& r) {
  task_result out = r;
  if (out.error)
    repair_text(*out.error);
  for (auto& a : out.artifacts)
    repair_text(a);
  repair_text(out.metadata.agent_used);
  repair_text(out.metadata.agent_id);
  return out;
}

} // namespace

void write_result_fields(json_writer& w, const task_result& r) {
  w.key("outcome");
  w.raw_string(to_string(r.outcome));
  w.key("exit_code");
  w.integer(r.exit_code);
  w.key("error");
  if (r.error)
    w.string(*r.error);
  else
    w.null();
  w.key("artifacts");
  w.begin_array();
  for (auto& a : r.artifacts)
    w.string(a);
  w.end_array();
  // Compact JSON, parsed and written by the node itself.
  if (!r.answer.empty()) {
    w.key("answer");
    w.raw(r.answer);
  }
  w.key("metadata");
  w.begin_object();
  w.key("agent_used");
  w.string(r.metadata.agent_used);
  w.key("agent_id");
  w.string(r.metadata.agent_id);
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
}

namespace {

// The kind's keys of each event, in the order of docs/BEHAVIOUR.md, Events.

void kind_fields(json_writer& w, const event_data::task_submitted& d) {
  w.key("environment");
  w.string(d.environment);
  w.key("agents");
  w.begin_array();
  for (auto& a : d.agents)
    w.string(a);
  w.end_array();
}

void kind_fields(json_writer& w, const event_data::attempt_started& d) {
  w.key("agent_id");
  w.string(d.agent_id);
  w.key("agent_cli");
  w.string(d.agent_cli);
  w.key("container_id");
  w.string(d.container_id);
  if (!d.member_state.empty()) {
    w.key("member_state");
    w.string(d.member_state);
  }
}

void kind_fields(json_writer& w, const event_data::log& d) {
  w.key("stream");
  w.string(d.stream);
  w.key("line");
  w.string(d.line);
}

void kind_fields(json_writer& w, const event_data::attempt_exited& d) {
  w.key("exit_code");
  w.integer(d.exit_code);
  w.key("signal");
  w.integer(d.signal);
  w.key("oom_killed");
  w.boolean(d.oom_killed);
  w.key("duration_s");
  w.number(d.duration_s);
  if (!d.infrastructure_error.empty()) {
    w.key("infrastructure_error");
    w.string(d.infrastructure_error);
  }
  if (!d.started) {
    // Nothing ran: the exit code means nothing.
    w.key("started");
    w.boolean(false);
  }
  // What this attempt used, when its CLI's structured output said.
  usage_fields(w, d.usage, d.cost_usd);
}

void kind_fields(json_writer& w, const event_data::classified& d) {
  w.key("class");
  w.raw_string(to_string(d.c.cls));
  w.key("rule");
  w.string(d.c.rule);
  w.key("line");
  w.string(d.c.line);
  w.key("retry_after_s");
  w.number(d.c.retry_after_s);
}

void kind_fields(json_writer& w, const event_data::retry_scheduled& d) {
  w.key("retry_count");
  w.integer(d.retry_count);
  w.key("agent");
  w.string(d.agent);
  w.key("delay_s");
  w.number(d.delay.delay_s);
  w.key("max_retries");
  w.integer(d.max_retries);
  w.key("delay_source");
  w.raw_string(to_string(d.delay.source));
  w.key("scheduled_s");
  w.number(d.delay.scheduled_s);
  w.key("capped");
  w.boolean(d.delay.capped);
  w.key("reason");
  w.string(d.reason);
  w.key("restart");
  w.integer(d.restart);
  w.key("ran_s");
  w.number(d.ran_s);
  w.key("stable");
  w.boolean(d.stable);
}

void kind_fields(json_writer& w, const event_data::agent_switched& d) {
  w.key("from");
  w.string(d.from);
  w.key("to");
  w.string(d.to);
  w.key("reason");
  w.string(d.reason);
  w.key("cause");
  w.string(d.cause);
}

void kind_fields(json_writer& w, const event_data::user_stop& d) {
  w.key("mode");
  w.raw_string(to_string(d.mode));
  w.key("message");
  w.string(d.message);
}

void kind_fields(json_writer& w, const event_data::task_done& d) {
  write_result_fields(w, d.result());
}

void kind_fields(json_writer& w, const event_data::escalated& d) {
  w.key("outcome");
  w.raw_string(to_string(d.outcome));
  w.key("parent");
  w.string(d.parent);
}

void kind_fields(json_writer& w, const event_data::warning& d) {
  w.key("message");
  w.string(d.message);
}

void kind_fields(json_writer& w, const event_data::group& d) {
  w.key("change");
  w.string(d.change);
  w.key("member");
  w.string(d.member);
  w.key("how");
  w.string(d.how);
  w.key("members");
  w.begin_array();
  for (auto& m : d.members)
    w.string(m);
  w.end_array();
  w.key("restarts");
  w.integer(static_cast<std::int64_t>(d.restarts));
  if (!d.outcome.empty()) {
    w.key("outcome");
    w.string(d.outcome);
  }
}

void kind_fields(json_writer& w, const event_data::step& d) {
  w.key("step");
  w.string(d.step);
  w.key("name");
  w.string(d.name);
  w.key("passed");
  w.boolean(d.passed);
  w.key("exit_code");
  if (d.exit_code)
    w.integer(*d.exit_code);
  else
    w.null();
  w.key("message");
  w.string(d.message);
}

/// The event of `kind` for `h`, holding `data`.
template<class Data>
event make_event(event_kind kind, const event_head& h, Data&& data) {
  event ev;
  ev.kind = kind;
  ev.task_id = h.task_id;
  ev.attempt = h.attempt;
  ev.ts = h.ts;
  ev.body = std::make_shared<const event_body>(
    h.trace_id, h.span_id, event_fields{std::forward<Data>(data)});
  return ev;
}

} // namespace

std::string event_body::render(const event& ev) const {
  json_writer w;
  head_fields(w, ev, trace_id(), span_id());
  if (typed_)
    std::visit([&](const auto& d) { kind_fields(w, d); }, typed_->data);
  w.end_object();
  return w.take();
}

const std::string& event::json() const {
  static const std::string none;
  return body ? body->json(*this) : none;
}

const event_fields* event::fields() const noexcept {
  return body ? body->fields() : nullptr;
}

std::string_view event::trace_id() const noexcept {
  return body ? body->trace_id() : std::string_view{};
}

std::string_view event::span_id() const noexcept {
  return body ? body->span_id() : std::string_view{};
}

std::shared_ptr<const event_body> json_event_body(std::string_view trace_id,
                                                  std::string_view span_id,
                                                  std::string json) {
  return std::make_shared<const event_body>(trace_id, span_id, std::move(json));
}

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

event task_submitted_event(const event_head& h, std::string_view environment,
                           const std::vector<std::string>& agents) {
  event_data::task_submitted d;
  d.environment = checked_text(environment);
  d.agents.reserve(agents.size());
  for (auto& a : agents)
    d.agents.push_back(checked_text(a));
  return make_event(event_kind::task_submitted, h, std::move(d));
}

event attempt_started_event(const event_head& h, std::string_view agent_id,
                            std::string_view agent_cli,
                            std::string_view container_id,
                            std::string_view member_state) {
  return make_event(event_kind::attempt_started, h,
                    event_data::attempt_started{
                      checked_text(agent_id), checked_text(agent_cli),
                      checked_text(container_id), checked_text(member_state)});
}

event log_event(const event_head& h, std::string_view line,
                std::string_view stream) {
  return make_event(event_kind::log, h,
                    event_data::log{checked_text(stream), checked_text(line)});
}

event attempt_exited_event(const event_head& h, const attempt_outcome& out) {
  event_data::attempt_exited d;
  d.exit_code = out.exit_code;
  d.signal = out.signal;
  d.oom_killed = out.oom_killed;
  d.duration_s = out.duration_s;
  d.infrastructure_error = checked_text(out.infrastructure_error);
  d.started = out.started;
  if (out.structured) {
    d.usage = out.structured->usage;
    d.cost_usd = out.structured->cost_usd;
  }
  return make_event(event_kind::attempt_exited, h, std::move(d));
}

event classified_event(const event_head& h, const classification& c) {
  event_data::classified d;
  d.c.cls = c.cls;
  d.c.rule = checked_text(c.rule);
  d.c.line = checked_text(c.line);
  d.c.retry_after_s = c.retry_after_s;
  d.c.lost_node = checked_text(c.lost_node);
  return make_event(event_kind::classified, h, std::move(d));
}

event retry_scheduled_event(const event_head& h, int retry_count,
                            int max_retries, std::string_view agent,
                            const delay_decision& delay,
                            std::string_view reason, int restart, double ran_s,
                            bool stable) {
  event_data::retry_scheduled d;
  d.restart = restart;
  d.ran_s = ran_s;
  d.stable = stable;
  d.retry_count = retry_count;
  d.max_retries = max_retries;
  d.agent = checked_text(agent);
  d.delay = delay;
  d.reason = checked_text(reason);
  return make_event(event_kind::retry_scheduled, h, std::move(d));
}

event agent_switched_event(const event_head& h, std::string_view from,
                           std::string_view to, std::string_view reason,
                           std::string_view cause) {
  return make_event(
    event_kind::agent_switched, h,
    event_data::agent_switched{checked_text(from), checked_text(to),
                               checked_text(reason), checked_text(cause)});
}

event user_stop_event(const event_head& h, stop_mode mode,
                      std::string_view message) {
  return make_event(event_kind::user_stop, h,
                    event_data::user_stop{mode, checked_text(message)});
}

event task_done_event(const event_head& h, const task_result& r) {
  return make_event(event_kind::task_done, h,
                    event_data::task_done{
                      std::make_shared<const task_result>(checked_result(r))});
}

event escalated_event(const event_head& h, task_outcome outcome,
                      std::string_view parent) {
  return make_event(event_kind::escalated, h,
                    event_data::escalated{outcome, checked_text(parent)});
}

event warning_event(const event_head& h, std::string_view message) {
  return make_event(event_kind::warning, h,
                    event_data::warning{checked_text(message)});
}

event step_event(const event_head& h, std::string_view step,
                 std::string_view name, bool passed,
                 std::optional<int> exit_code, std::string_view message) {
  return make_event(event_kind::step, h,
                    event_data::step{checked_text(step), checked_text(name),
                                     passed, exit_code, checked_text(message)});
}

event group_event(const event_head& h, std::string_view change,
                  std::string_view member, std::string_view how,
                  const std::vector<std::string>& members,
                  std::uint64_t restarts, std::string_view outcome) {
  event_data::group d{
    checked_text(change), checked_text(member), checked_text(how), {}, restarts,
    checked_text(outcome)};
  d.members.reserve(members.size());
  for (auto& m : members)
    d.members.push_back(checked_text(m));
  return make_event(event_kind::group, h, std::move(d));
}

std::string result_to_json(const task_result& r) {
  json_writer w;
  w.begin_object();
  write_result_fields(w, r);
  w.key("task_id");
  w.string(r.task_id);
  w.end_object();
  return w.take();
}

} // namespace tasksup
