#include "tasksup/supervisor/output_parser.hpp"

#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/bounded_number.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <array>
#include <cctype>
#include <cmath>
#include <utility>

namespace tasksup {

namespace json = boost::json;

namespace {

constexpr std::array<std::pair<output_format, std::string_view>, 4>
  format_names{{
    {output_format::text, "text"},
    {output_format::claude_stream_json, "claude-stream-json"},
    {output_format::codex_jsonl, "codex-jsonl"},
    {output_format::gemini_json, "gemini-json"},
  }};

/// Longest rendering of one event shown to a person.
constexpr std::size_t max_display_bytes = 300;

std::string bounded(std::string_view text, std::size_t max) {
  if (text.size() <= max)
    return std::string{text};
  return std::string{text.substr(0, max)} + "...";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

/// Parses `text` as one JSON value, or nullopt (never throws).
std::optional<json::value> parse_json(std::string_view text) {
  if (text.size() > max_structured_doc_bytes)
    return std::nullopt;
  boost::system::error_code ec;
  auto v = json::parse(json::string_view{text.data(), text.size()}, ec);
  if (ec)
    return std::nullopt;
  return v;
}

const json::value* member(const json::value& v, std::string_view key) {
  if (!v.is_object())
    return nullptr;
  return v.as_object().if_contains(json::string_view{key.data(), key.size()});
}

const json::value* path(const json::value& v,
                        std::initializer_list<std::string_view> keys) {
  const json::value* cur = &v;
  for (auto key : keys) {
    cur = member(*cur, key);
    if (cur == nullptr)
      return nullptr;
  }
  return cur;
}

std::optional<std::string_view> str(const json::value* v) {
  if (v == nullptr || !v->is_string())
    return std::nullopt;
  return std::string_view{v->as_string().data(), v->as_string().size()};
}

/// A non-negative integer that fits, or nullopt (untrusted numbers).
std::optional<std::int64_t> count(const json::value* v) {
  if (v == nullptr)
    return std::nullopt;
  if (v->is_int64() && v->as_int64() >= 0)
    return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= uint64_t{INT64_MAX})
    return static_cast<std::int64_t>(v->as_uint64());
  if (v->is_double()) {
    auto d = v->as_double();
    if (std::isfinite(d) && d >= 0 && d < 9e18)
      return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

/// A cost in US dollars: a non-negative number, clamped to `max_cost_usd`
/// (the sum of a task's attempts is clamped too), or nullopt.
std::optional<double> cost(const json::value* v) {
  if (v == nullptr || !v->is_number())
    return std::nullopt;
  auto d = v->to_number<double>();
  if (std::isnan(d) || d < 0)
    return std::nullopt;
  return bounded_cost(d);
}

/// An HTTP status in 100..599, or 0.
int http_status(const json::value* v) {
  auto n = count(v);
  return n && *n >= 100 && *n <= 599 ? static_cast<int>(*n) : 0;
}

/// "... status 401 Unauthorized ..." / "last status: 429" -> the number.
int status_in_text(std::string_view text) {
  constexpr std::string_view word = "status";
  for (auto pos = text.find(word); pos != std::string_view::npos;
       pos = text.find(word, pos + 1)) {
    auto i = pos + word.size();
    while (i < text.size() && (text[i] == ':' || text[i] == ' '))
      ++i;
    if (i + 3 > text.size())
      continue;
    bool digits = true;
    for (std::size_t k = 0; k < 3; ++k)
      digits = digits && std::isdigit(static_cast<unsigned char>(text[i + k]));
    if (!digits || (i + 3 < text.size() &&
                    std::isdigit(static_cast<unsigned char>(text[i + 3]))))
      continue;
    int n =
      (text[i] - '0') * 100 + (text[i + 1] - '0') * 10 + (text[i + 2] - '0');
    if (n >= 100 && n <= 599)
      return n;
  }
  return 0;
}

/// Gemini wraps the API's error document in its error message
/// (`{"error":{"code":400,"status":"INVALID_ARGUMENT","details":[{"reason":
/// "API_KEY_INVALID"}]}}`): take the status, the reason and the message.
void read_google_error(std::string_view text, structured_error& e) {
  auto doc = parse_json(text);
  if (!doc)
    return;
  const auto* err = member(*doc, "error");
  if (err == nullptr)
    return;
  if (auto code = http_status(member(*err, "code")))
    e.http_status = code;
  if (auto s = str(member(*err, "status")))
    e.type = bounded(*s, 100);
  if (const auto* details = member(*err, "details");
      details != nullptr && details->is_array())
    for (const auto& d : details->as_array())
      if (auto reason = str(member(d, "reason")); reason && !reason->empty()) {
        e.type = bounded(*reason, 100);
        break;
      }
  if (auto msg = str(member(*err, "message")))
    e.message = bounded(*msg, max_structured_text_bytes);
}

/// Claude Code's rejected subscription limit: `api_error_params.
/// rate_limit_info` with status "rejected" and a 5-hour or weekly
/// `rateLimitType` (its "overage" is usage credits, not a quota).
bool is_subscription_limit(const json::value& doc) {
  const auto* info = path(doc, {"api_error_params", "rate_limit_info"});
  if (info == nullptr)
    return false;
  auto kind = str(member(*info, "rateLimitType")).value_or("");
  return str(member(*info, "status")) == std::string_view{"rejected"} &&
         (kind.substr(0, 9) == "five_hour" || kind.substr(0, 9) == "seven_day");
}

void finish_error(structured_error& e) {
  if (e.http_status == 0)
    e.http_status = status_in_text(e.message);
  if (!e.retry_after_s)
    e.retry_after_s = parse_retry_after(e.message);
}

} // namespace

std::string_view to_string(output_format x) noexcept {
  for (const auto& [value, name] : format_names)
    if (value == x)
      return name;
  return "text";
}

std::optional<output_format>
parse_output_format(std::string_view str) noexcept {
  for (const auto& [value, name] : format_names)
    if (name == str)
      return value;
  return std::nullopt;
}

output_parser::output_parser(output_format format) noexcept : format_(format) {}

void output_parser::keep_final(std::string_view text) {
  result_.final_message = bounded(text, max_structured_text_bytes);
  if (text.size() <= max_answer_bytes)
    final_text_.assign(text);
  else
    final_text_.clear();
}

std::string output_parser::feed(std::string_view line) {
  switch (format_) {
    case output_format::text:
      return std::string{line};
    case output_format::claude_stream_json:
    case output_format::codex_jsonl:
      return feed_json_line(line);
    case output_format::gemini_json:
      return feed_gemini(line);
  }
  return std::string{line};
}

std::string output_parser::feed_json_line(std::string_view line) {
  auto t = trim(line);
  if (t.empty() || t.front() != '{')
    return std::string{line};
  auto doc = parse_json(t);
  if (!doc || !doc->is_object())
    return std::string{line};
  auto type = str(member(*doc, "type")).value_or("");
  if (format_ == output_format::claude_stream_json) {
    if (type == "assistant") {
      std::string text;
      if (const auto* content = path(*doc, {"message", "content"});
          content != nullptr && content->is_array())
        for (const auto& part : content->as_array())
          if (str(member(part, "type")) == std::string_view{"text"})
            if (auto s = str(member(part, "text")))
              text += *s;
      // An API error arrives as a synthetic assistant message carrying the
      // CLI's error kind ("billing_error", "rate_limit", ...).
      if (auto kind = str(member(*doc, "error"))) {
        structured_error e;
        e.type = bounded(*kind, 100);
        if (is_subscription_limit(*doc))
          e.type = std::string{usage_limit_reached_type};
        e.http_status = http_status(member(*doc, "api_error_status"));
        e.message = bounded(text, max_structured_text_bytes);
        finish_error(e);
        result_.error = std::move(e);
        return "error: " + bounded(text, max_display_bytes);
      }
      if (text.empty())
        return {};
      return "assistant: " + bounded(text, max_display_bytes);
    }
    if (type == "result") {
      auto text = str(member(*doc, "result")).value_or("");
      if (const auto* u = member(*doc, "usage")) {
        token_usage usage;
        usage.input_tokens = count(member(*u, "input_tokens")).value_or(0);
        usage.output_tokens = count(member(*u, "output_tokens")).value_or(0);
        usage.cached_input_tokens =
          count(member(*u, "cache_read_input_tokens")).value_or(0);
        result_.usage = usage;
      }
      result_.cost_usd = cost(member(*doc, "total_cost_usd"));
      const auto* is_error = member(*doc, "is_error");
      if (is_error != nullptr && is_error->is_bool() && is_error->as_bool()) {
        // The API's error type is the more precise one, except that the API
        // says only invalid_request_error where the CLI knows it is
        // "billing_error" (credit balance too low).
        structured_error e = result_.error.value_or(structured_error{});
        if (is_subscription_limit(*doc))
          e.type = std::string{usage_limit_reached_type};
        else if (auto api_type = str(member(*doc, "api_error_type"));
                 api_type && e.type != "billing_error" &&
                 e.type != usage_limit_reached_type)
          e.type = bounded(*api_type, 100);
        if (auto st = http_status(member(*doc, "api_error_status")))
          e.http_status = st;
        if (e.message.empty())
          e.message = bounded(text, max_structured_text_bytes);
        finish_error(e);
        result_.error = std::move(e);
        return "failed: " + bounded(text, max_display_bytes);
      }
      keep_final(text);
      return "done" + (result_.cost_usd
                         ? " (cost $" + std::to_string(*result_.cost_usd) + ")"
                         : std::string{});
    }
    return {}; // init, user, stream events: machinery
  }
  // codex exec --json
  if (type == "item.completed") {
    const auto* item = member(*doc, "item");
    auto kind = item ? str(member(*item, "type")).value_or("") : "";
    auto text = item ? str(member(*item, "text")).value_or("") : "";
    if (kind == "agent_message") {
      keep_final(text);
      return "assistant: " + bounded(text, max_display_bytes);
    }
    if (kind == "command_execution")
      if (auto cmd = str(member(*item, "command")))
        return "ran: " + bounded(*cmd, max_display_bytes);
    return {};
  }
  if (type == "turn.completed") {
    if (const auto* u = member(*doc, "usage")) {
      token_usage usage;
      usage.input_tokens = count(member(*u, "input_tokens")).value_or(0);
      usage.output_tokens = count(member(*u, "output_tokens")).value_or(0);
      usage.cached_input_tokens =
        count(member(*u, "cached_input_tokens")).value_or(0);
      result_.usage = usage;
      return "usage: " + std::to_string(usage.input_tokens) + " in, " +
             std::to_string(usage.output_tokens) + " out";
    }
    return {};
  }
  if (type == "error" || type == "turn.failed") {
    auto msg = type == "error" ? str(member(*doc, "message"))
                               : str(path(*doc, {"error", "message"}));
    if (!msg)
      return {};
    structured_error e;
    e.message = bounded(*msg, max_structured_text_bytes);
    finish_error(e);
    result_.error = std::move(e);
    // codex prints the same error as `error` and again as `turn.failed`.
    return type == "error" ? "error: " + bounded(*msg, max_display_bytes)
                           : std::string{};
  }
  return {};
}

std::string output_parser::feed_gemini(std::string_view line) {
  // The envelope is pretty-printed: it starts with a line "{" and ends with
  // a line "}" (both at column 0); everything else is shown as is.
  if (!collecting_) {
    if (trim(line) != "{" || line.front() != '{')
      return std::string{line};
    collecting_ = true;
    overflowed_ = false;
    pending_.assign("{\n");
    return {};
  }
  if (!overflowed_) {
    if (pending_.size() + line.size() + 1 > max_structured_doc_bytes) {
      overflowed_ = true;
      pending_.clear();
      pending_.shrink_to_fit();
    } else {
      pending_.append(line.data(), line.size());
      pending_.push_back('\n');
    }
  }
  if (line.empty() || line.front() != '}')
    return {};
  collecting_ = false;
  if (overflowed_)
    return {};
  auto doc = parse_json(pending_);
  pending_.clear();
  if (!doc || !doc->is_object())
    return {};
  std::string shown;
  if (auto text = str(member(*doc, "response"))) {
    keep_final(*text);
    shown = "assistant: " + bounded(*text, max_display_bytes);
  }
  if (const auto* models = path(*doc, {"stats", "models"});
      models != nullptr && models->is_object()) {
    token_usage usage;
    bool any = false;
    for (const auto& kv : models->as_object()) {
      const auto* tokens = member(kv.value(), "tokens");
      if (tokens == nullptr)
        continue;
      any = true;
      token_usage model;
      model.input_tokens = count(member(*tokens, "prompt")).value_or(0);
      model.output_tokens = count(member(*tokens, "candidates")).value_or(0);
      model.cached_input_tokens = count(member(*tokens, "cached")).value_or(0);
      usage += model;
    }
    if (any)
      result_.usage = usage;
  }
  if (const auto* err = member(*doc, "error")) {
    structured_error e;
    auto msg = str(member(*err, "message")).value_or("");
    e.http_status = http_status(member(*err, "code"));
    e.message = bounded(msg, max_structured_text_bytes);
    read_google_error(msg, e);
    finish_error(e);
    shown = "error: " + bounded(e.message, max_display_bytes);
    result_.error = std::move(e);
  }
  return shown;
}

namespace {

struct type_rule {
  std::string_view type;
  error_class cls;
};

/// Provider error types (Anthropic, OpenAI, Google) and the CLIs' own error
/// kinds that say what to do without reading any text.
constexpr std::array<type_rule, 24> type_rules{{
  {usage_limit_reached_type, error_class::quota_exhausted},
  {"usage_limit_exceeded", error_class::quota_exhausted},
  {"authentication_error", error_class::fatal},
  {"authentication_failed", error_class::fatal},
  {"permission_error", error_class::fatal},
  {"invalid_api_key", error_class::fatal},
  {"API_KEY_INVALID", error_class::fatal},
  {"UNAUTHENTICATED", error_class::fatal},
  {"PERMISSION_DENIED", error_class::fatal},
  {"billing_error", error_class::agent_failure},
  {"insufficient_quota", error_class::agent_failure},
  {"BILLING_DISABLED", error_class::agent_failure},
  {"rate_limit_error", error_class::rate_limit},
  {"rate_limit", error_class::rate_limit},
  {"rate_limit_exceeded", error_class::rate_limit},
  {"RATE_LIMIT_EXCEEDED", error_class::rate_limit},
  {"overloaded_error", error_class::retryable},
  {"server_error", error_class::retryable},
  {"server_is_overloaded", error_class::retryable},
  {"api_error", error_class::retryable},
  {"UNAVAILABLE", error_class::retryable},
  {"INTERNAL", error_class::retryable},
  {"DEADLINE_EXCEEDED", error_class::retryable},
  {"timeout_error", error_class::retryable},
}};

} // namespace

std::optional<classification>
classify_structured(const structured_error& e,
                    std::chrono::system_clock::time_point now) {
  classification c;
  c.line = bounded(e.message, max_display_line_bytes);
  if (e.type == idle_timeout_type || e.type == idle_noise_type) {
    c.cls = error_class::retryable;
    c.rule = std::string{e.type};
    return c;
  }
  bool found = false;
  for (const auto& r : type_rules)
    if (r.type == e.type) {
      c.cls = r.cls;
      c.rule = "structured:" + std::string{r.type};
      found = true;
      break;
    }
  if (!found) {
    // A bare status decides only where it cannot mean two things: a 429 may
    // be a per-minute limit or an empty account, and only the text tells.
    auto s = e.http_status;
    if (s == 401 || s == 403)
      c.cls = error_class::fatal;
    else if (s == 500 || s == 502 || s == 503 || s == 504 || s == 529)
      c.cls = error_class::retryable;
    else
      return std::nullopt;
    c.rule = "structured:http_" + std::to_string(s);
  }
  if (c.cls == error_class::rate_limit)
    c.retry_after_s = e.retry_after_s;
  if (c.cls == error_class::quota_exhausted)
    c.retry_after_s = parse_quota_reset(e.message, now);
  return c;
}

classification classify_attempt(const classifier& rules,
                                const attempt_outcome& outcome,
                                std::string_view agent_cli,
                                std::chrono::system_clock::time_point now) {
  auto by_text = rules.classify(outcome, agent_cli, now);
  const auto* error = outcome.structured && outcome.structured->error
                        ? &*outcome.structured->error
                        : nullptr;
  // tasksup stopped a silent attempt itself: the kill that may follow the
  // stop is not a crash.
  if (error != nullptr &&
      (error->type == idle_timeout_type || error->type == idle_noise_type) &&
      by_text.cls != error_class::infrastructure)
    return *classify_structured(*error, now);
  // What the machinery saw (an OOM kill, a crash signal, a runtime that
  // failed) outranks what the agent said before it died.
  if (by_text.cls == error_class::container_crash ||
      by_text.cls == error_class::infrastructure)
    return by_text;
  if (outcome.structured && outcome.structured->error)
    if (auto by_error = classify_structured(*outcome.structured->error, now)) {
      // "Rate limit" from the CLI, a quota with its reset in the text: the
      // text is the more precise.
      if (by_error->cls == error_class::rate_limit &&
          by_text.cls == error_class::quota_exhausted)
        return by_text;
      // A hint printed in the text still counts when the error had none.
      if (by_error->cls == by_text.cls && !by_error->retry_after_s &&
          (by_text.cls == error_class::rate_limit ||
           by_text.cls == error_class::quota_exhausted))
        by_error->retry_after_s = by_text.retry_after_s;
      return *by_error;
    }
  return by_text;
}

} // namespace tasksup
