#include "tasksup/actors/events.hpp"

#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/text.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

namespace tasksup {

namespace {

/// Lowercase hex digits, for ids and `\u00XX` escapes.
constexpr char hex_chars[] = "0123456789abcdef";

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

/// Writes one JSON document straight into a string, byte for byte what
/// `boost::json::serialize` produces for the same object built key by key
/// (same escaping), except numbers, which never take exponent form
/// (`format_json_number`); it does so without building the object:
/// rendering events through `boost::json::object` cost ~18 % of the CPU of
/// a supervised attempt (BENCHMARKS.md §1).
class json_writer {
public:
  /// Room for a typical event (~250 bytes) from the start.
  json_writer() { grow(128); }

  void begin_object() {
    separator();
    put('{');
    first_ = true;
  }

  void end_object() {
    put('}');
    first_ = false;
  }

  void begin_array() {
    separator();
    put('[');
    first_ = true;
  }

  void end_array() {
    put(']');
    first_ = false;
  }

  /// An object key; the value written next belongs to it. Keys are the
  /// event kinds' fixed names: plain ASCII that needs no escaping.
  void key(std::string_view k) {
    separator();
    reserve(k.size() + 3);
    *p_++ = '"';
    copy(k);
    *p_++ = '"';
    *p_++ = ':';
    first_ = true; // no comma before the value
  }

  /// A string as is (known-valid text: kind names, ids).
  void raw_string(std::string_view s) {
    separator();
    if (plain(s))
      quoted(s);
    else
      escaped(s);
  }

  /// Untrusted text: invalid UTF-8 is replaced by U+FFFD first.
  void string(std::string_view s) {
    separator();
    if (plain(s))
      quoted(s);
    else if (valid_utf8(s))
      escaped(s);
    else
      escaped(sanitize_utf8(s));
  }

  void integer(std::int64_t x) {
    separator();
    reserve(24);
    p_ = std::to_chars(p_, p_ + 24, x).ptr;
  }

  void number(double x) {
    separator();
    reserve(max_json_number_chars);
    p_ += format_json_number(x, p_);
  }

  void boolean(bool x) {
    separator();
    append(x ? std::string_view{"true"} : std::string_view{"false"});
  }

  void null() {
    separator();
    append("null");
  }

  std::string take() {
    auto used = static_cast<std::size_t>(p_ - out_.data());
    out_.resize(used);
    p_ = end_ = nullptr;
    // The event keeps this text while it travels: an escaped line reserved
    // six bytes per input byte, so give back what lies far beyond its size.
    if (out_.capacity() - used > 1024)
      out_.shrink_to_fit();
    return std::move(out_);
  }

private:
  // The text is written through a cursor into `out_`, sized ahead (`grow`)
  // and cut to length by `take`: appending to a std::string piece by piece
  // cost more than the text itself (BENCHMARKS.md §1).

  /// Room for `n` more bytes at the cursor.
  void reserve(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n)
      grow(n);
  }

  void grow(std::size_t n) {
    auto used = p_ ? static_cast<std::size_t>(p_ - out_.data()) : 0;
    out_.resize(std::max(out_.size() * 2, used + n + 256));
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  void put(char c) {
    reserve(1);
    *p_++ = c;
  }

  /// Copies `s` to the cursor; the room must be reserved.
  void copy(std::string_view s) {
    if (!s.empty())
      std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }

  void append(std::string_view s) {
    reserve(s.size());
    copy(s);
  }

  void separator() {
    if (!first_)
      put(',');
    first_ = false;
  }

  /// True if `s` is printable ASCII without quotes or backslashes: the
  /// common case (ids, names, numbers as text), copied in one piece. Checks
  /// eight bytes at a time (ids are 16 and 32 bytes long).
  static bool plain(std::string_view s) {
    constexpr std::uint64_t ones = 0x0101010101010101ull;
    constexpr std::uint64_t highs = 0x8080808080808080ull;
    // A byte of `x` is zero: the classic SWAR test.
    auto has_zero = [](std::uint64_t x) { return (x - ones) & ~x & highs; };
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      std::uint64_t x;
      std::memcpy(&x, s.data() + i, 8);
      // Bytes >= 0x80, then bytes < 0x20 (x - 0x20 borrows into the high
      // bit only for those, once the high bytes are ruled out), '"', '\\'.
      if ((x & highs) != 0 || ((x - 0x20 * ones) & highs) != 0 ||
          has_zero(x ^ ('"' * ones)) != 0 || has_zero(x ^ ('\\' * ones)) != 0)
        return false;
    }
    for (; i < s.size(); ++i) {
      auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\')
        return false;
    }
    return true;
  }

  void quoted(std::string_view s) {
    reserve(s.size() + 2);
    *p_++ = '"';
    copy(s);
    *p_++ = '"';
  }

  /// `s` quoted with JSON escapes (at most 6 bytes per input byte).
  void escaped(std::string_view s) {
    reserve(s.size() * 6 + 2);
    *p_++ = '"';
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      if (c >= 0x20 && c != '"' && c != '\\') {
        *p_++ = ch;
        continue;
      }
      *p_++ = '\\';
      switch (c) {
        case '"':
          *p_++ = '"';
          break;
        case '\\':
          *p_++ = '\\';
          break;
        case '\b':
          *p_++ = 'b';
          break;
        case '\t':
          *p_++ = 't';
          break;
        case '\n':
          *p_++ = 'n';
          break;
        case '\f':
          *p_++ = 'f';
          break;
        case '\r':
          *p_++ = 'r';
          break;
        default:
          *p_++ = 'u';
          *p_++ = '0';
          *p_++ = '0';
          *p_++ = hex_chars[c >> 4];
          *p_++ = hex_chars[c & 15];
      }
    }
    *p_++ = '"';
  }

  std::string out_;
  char* p_ = nullptr;
  char* end_ = nullptr;
  bool first_ = true;
};

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

event finish(event_kind kind, const event_head& h, json_writer& w) {
  w.end_object();
  event ev;
  ev.kind = kind;
  ev.task_id = h.task_id;
  ev.attempt = h.attempt;
  ev.trace_id = h.trace_id;
  ev.span_id = h.span_id;
  ev.ts = h.ts;
  ev.json = w.take();
  return ev;
}

void optional_string(json_writer& w, const std::optional<std::string>& x) {
  if (x)
    w.string(*x);
  else
    w.null();
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

void result_fields(json_writer& w, const task_result& r) {
  w.key("outcome");
  w.raw_string(to_string(r.outcome));
  w.key("exit_code");
  w.integer(r.exit_code);
  w.key("error");
  optional_string(w, r.error);
  w.key("artifacts");
  w.begin_array();
  for (auto& a : r.artifacts)
    w.string(a);
  w.end_array();
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

std::size_t format_json_number(double x, char* out) {
  if (!std::isfinite(x)) {
    // JSON has no infinities or NaN.
    std::memcpy(out, "null", 4);
    return 4;
  }
  // The shortest digits that read back as `x`, in plain decimal notation:
  // a timestamp reads 1795362464.5893607, not 1.7953624645893607E9.
  auto r = std::to_chars(out, out + max_json_number_chars - 2, x,
                         std::chars_format::fixed);
  auto n = static_cast<std::size_t>(r.ptr - out);
  if (std::memchr(out, '.', n) == nullptr) {
    // Keep it a floating-point number for readers that tell them apart.
    out[n++] = '.';
    out[n++] = '0';
  }
  return n;
}

void append_json_number(std::string& out, double x) {
  char buf[max_json_number_chars];
  out.append(buf, format_json_number(x, buf));
}

double wall_clock_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

event task_submitted_event(const event_head& h, std::string_view environment,
                           const std::vector<std::string>& agents) {
  json_writer w;
  head_fields(w, "task_submitted", h);
  w.key("environment");
  w.string(environment);
  w.key("agents");
  w.begin_array();
  for (auto& a : agents)
    w.string(a);
  w.end_array();
  return finish(event_kind::task_submitted, h, w);
}

event attempt_started_event(const event_head& h, std::string_view agent_id,
                            std::string_view agent_cli,
                            std::string_view container_id) {
  json_writer w;
  head_fields(w, "attempt_started", h);
  w.key("agent_id");
  w.string(agent_id);
  w.key("agent_cli");
  w.string(agent_cli);
  w.key("container_id");
  w.string(container_id);
  return finish(event_kind::attempt_started, h, w);
}

event log_event(const event_head& h, std::string_view line,
                std::string_view stream) {
  json_writer w;
  head_fields(w, "log", h);
  w.key("stream");
  w.string(stream);
  w.key("line");
  w.string(line);
  return finish(event_kind::log, h, w);
}

event attempt_exited_event(const event_head& h, const attempt_outcome& out) {
  json_writer w;
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
    w.string(out.infrastructure_error);
  }
  if (!out.started) {
    // Nothing ran: the exit code means nothing.
    w.key("started");
    w.boolean(false);
  }
  // What this attempt used, when its CLI's structured output said.
  if (out.structured)
    usage_fields(w, out.structured->usage, out.structured->cost_usd);
  return finish(event_kind::attempt_exited, h, w);
}

event classified_event(const event_head& h, const classification& c) {
  json_writer w;
  head_fields(w, "classified", h);
  w.key("class");
  w.raw_string(to_string(c.cls));
  w.key("rule");
  w.string(c.rule);
  w.key("line");
  w.string(c.line);
  w.key("retry_after_s");
  if (c.retry_after_s)
    w.number(*c.retry_after_s);
  else
    w.null();
  return finish(event_kind::classified, h, w);
}

event retry_scheduled_event(const event_head& h, int retry_count,
                            int max_retries, std::string_view agent,
                            const delay_decision& delay,
                            std::string_view reason) {
  json_writer w;
  head_fields(w, "retry_scheduled", h);
  w.key("retry_count");
  w.integer(retry_count);
  w.key("agent");
  w.string(agent);
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
  w.string(reason);
  return finish(event_kind::retry_scheduled, h, w);
}

event agent_switched_event(const event_head& h, std::string_view from,
                           std::string_view to, std::string_view reason) {
  json_writer w;
  head_fields(w, "agent_switched", h);
  w.key("from");
  w.string(from);
  w.key("to");
  w.string(to);
  w.key("reason");
  w.string(reason);
  return finish(event_kind::agent_switched, h, w);
}

event user_stop_event(const event_head& h, stop_mode mode,
                      std::string_view message) {
  json_writer w;
  head_fields(w, "user_stop", h);
  w.key("mode");
  w.raw_string(to_string(mode));
  w.key("message");
  w.string(message);
  return finish(event_kind::user_stop, h, w);
}

event task_done_event(const event_head& h, const task_result& r) {
  json_writer w;
  head_fields(w, "task_done", h);
  result_fields(w, r);
  return finish(event_kind::task_done, h, w);
}

event escalated_event(const event_head& h, task_outcome outcome,
                      std::string_view parent) {
  json_writer w;
  head_fields(w, "escalated", h);
  w.key("outcome");
  w.raw_string(to_string(outcome));
  w.key("parent");
  w.string(parent);
  return finish(event_kind::escalated, h, w);
}

event warning_event(const event_head& h, std::string_view message) {
  json_writer w;
  head_fields(w, "warning", h);
  w.key("message");
  w.string(message);
  return finish(event_kind::warning, h, w);
}

event step_event(const event_head& h, std::string_view step,
                 std::string_view name, bool passed,
                 std::optional<int> exit_code, std::string_view message) {
  json_writer w;
  head_fields(w, "step", h);
  w.key("step");
  w.string(step);
  w.key("name");
  w.string(name);
  w.key("passed");
  w.boolean(passed);
  w.key("exit_code");
  if (exit_code)
    w.integer(*exit_code);
  else
    w.null();
  w.key("message");
  w.string(message);
  return finish(event_kind::step, h, w);
}

std::string result_to_json(const task_result& r) {
  json_writer w;
  w.begin_object();
  result_fields(w, r);
  w.key("task_id");
  w.string(r.task_id);
  w.end_object();
  return w.take();
}

std::string sanitize_utf8(std::string_view s) {
  // Each maximal invalid subpart becomes one U+FFFD.
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out.push_back(s[i]);
      ++i;
      continue;
    }
    auto r = scan_utf8(s, i);
    if (r.len == 0) {
      out.append(replacement);
      ++i;
    } else if (r.valid == r.len) {
      out.append(s.substr(i, r.len));
      i += r.len;
    } else {
      out.append(replacement);
      i += r.valid;
    }
  }
  return out;
}

} // namespace tasksup
