#include "tasksup/supervisor/classifier.hpp"

#include <re2/re2.h>

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view agent_cli_placeholder = "{agent_cli}";

/// Stands in for the agent name when a templated pattern is validated.
constexpr std::string_view sample_agent_cli = "agent";

/// Memory budget of one compiled rule (program plus DFA cache). RE2 falls back
/// to its linear NFA when the DFA cache fills, so this bounds memory, not
/// correctness; an oversized pattern fails to compile and is reported.
constexpr int64_t regex_max_mem = int64_t{8} << 20;

/// Longest hint `parse_retry_after` accepts; beyond a day a number after
/// "retry after" is far more likely a timestamp than a real wait.
constexpr double max_retry_after_s = 86400.0;

/// Integer digits accepted in one duration component (keeps the arithmetic
/// exact and rejects epoch timestamps in milliseconds early).
constexpr std::size_t max_integer_digits = 12;

/// Output is untrusted bytes: Latin-1 maps every byte to one character so
/// invalid UTF-8 can never make a pattern fail to apply.
RE2::Options regex_options() {
  RE2::Options opts;
  opts.set_encoding(RE2::Options::EncodingLatin1);
  opts.set_case_sensitive(false);
  opts.set_log_errors(false);
  opts.set_never_capture(true);
  opts.set_max_mem(regex_max_mem);
  return opts;
}

re2::StringPiece piece(std::string_view str) {
  return re2::StringPiece{str.data(), str.size()};
}

bool contains(const std::vector<int>& xs, int x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

bool is_templated(const std::string& pattern) {
  return pattern.find(agent_cli_placeholder) != std::string::npos;
}

std::string substitute_agent(const std::string& pattern,
                             const std::string& quoted) {
  std::string out;
  out.reserve(pattern.size() + quoted.size());
  std::size_t pos = 0;
  for (;;) {
    auto hit = pattern.find(agent_cli_placeholder, pos);
    if (hit == std::string::npos)
      break;
    out.append(pattern, pos, hit - pos);
    out += quoted;
    pos = hit + agent_cli_placeholder.size();
  }
  out.append(pattern, pos, std::string::npos);
  return out;
}

/// Appends `(?:pattern)` as one more branch of an alternation. Each pattern
/// was compiled on its own first, so wrapping cannot change its meaning.
void append_branch(std::string& alternation, const std::string& pattern) {
  if (!alternation.empty())
    alternation += '|';
  alternation += "(?:";
  alternation += pattern;
  alternation += ')';
}

std::string_view basename_of(std::string_view cli) {
  auto slash = cli.rfind('/');
  return slash == std::string_view::npos ? cli : cli.substr(slash + 1);
}

bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

/// The line as shown in explanations: the whole line when it is short, else
/// `max_display_line_bytes` around `focus` (where the match starts), with
/// "..." marking what was cut. Cuts avoid splitting a UTF-8 sequence.
std::string display_line(std::string_view line, std::size_t focus) {
  if (line.size() <= max_display_line_bytes)
    return std::string{line};
  constexpr std::size_t context_before = 100;
  auto begin = focus > context_before ? focus - context_before : 0;
  begin = std::min(begin, line.size() - max_display_line_bytes);
  auto end = begin + max_display_line_bytes;
  for (int i = 0; i < 3 && begin < end && is_continuation_byte(line[begin]);
       ++i)
    ++begin;
  for (int i = 0; i < 3 && end < line.size() && end > begin &&
                  is_continuation_byte(line[end]);
       ++i)
    --end;
  std::string out;
  out.reserve(end - begin + 6);
  if (begin > 0)
    out += "...";
  out.append(line.data() + begin, end - begin);
  if (end < line.size())
    out += "...";
  return out;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_alpha(char c) {
  auto l = lower(c);
  return l >= 'a' && l <= 'z';
}

/// Case-insensitive `word` at `pos`; returns the position after it or npos.
std::size_t match_word(std::string_view str, std::size_t pos,
                       std::string_view word) {
  if (str.size() - pos < word.size())
    return std::string_view::npos;
  for (std::size_t i = 0; i < word.size(); ++i)
    if (lower(str[pos + i]) != word[i])
      return std::string_view::npos;
  return pos + word.size();
}

std::size_t skip_chars(std::string_view str, std::size_t pos,
                       std::string_view set) {
  while (pos < str.size() && set.find(str[pos]) != std::string_view::npos)
    ++pos;
  return pos;
}

/// Words of one "come back later" phrase; between words any run (possibly
/// empty) of spaces, tabs, '-' or '_' is allowed, so "Retry-After",
/// "retry_after", "retryAfter" and "retry after" are all one phrase.
struct retry_phrase {
  std::string_view words[3];
};

constexpr retry_phrase retry_phrases[] = {
  {{"retry", "after", {}}},    {{"retry", "in", {}}},
  {{"retry", "delay", {}}},    {{"try", "again", "in"}},
  {{"try", "again", "after"}},
};

constexpr std::string_view word_separators = " \t-_";

/// Between the phrase and the value: "Retry-After: 30", `"retryDelay": "38s"`,
/// "retry_after=5".
constexpr std::string_view value_separators = " \t:=\"'";

std::size_t match_phrase(std::string_view str, std::size_t pos,
                         const retry_phrase& phrase) {
  for (std::size_t i = 0; i < 3 && !phrase.words[i].empty(); ++i) {
    if (i > 0)
      pos = skip_chars(str, pos, word_separators);
    pos = match_word(str, pos, phrase.words[i]);
    if (pos == std::string_view::npos)
      return pos;
  }
  return pos;
}

struct duration_unit {
  std::string_view name;
  double seconds;
};

constexpr duration_unit duration_units[] = {
  {"ms", 0.001},
  {"msec", 0.001},
  {"msecs", 0.001},
  {"millisecond", 0.001},
  {"milliseconds", 0.001},
  {"s", 1},
  {"sec", 1},
  {"secs", 1},
  {"second", 1},
  {"seconds", 1},
  {"m", 60},
  {"min", 60},
  {"mins", 60},
  {"minute", 60},
  {"minutes", 60},
  {"h", 3600},
  {"hr", 3600},
  {"hrs", 3600},
  {"hour", 3600},
  {"hours", 3600},
};

std::optional<double> unit_seconds(std::string_view word) {
  for (const auto& unit : duration_units) {
    if (unit.name.size() != word.size())
      continue;
    if (match_word(word, 0, unit.name) != std::string_view::npos)
      return unit.seconds;
  }
  return std::nullopt;
}

/// Parses a decimal number ("30", "1.5") at `pos`; advances `pos`. Fails on
/// more than `max_integer_digits` integer digits.
std::optional<double> parse_number(std::string_view str, std::size_t& pos) {
  double value = 0;
  std::size_t digits = 0;
  while (pos < str.size() && is_digit(str[pos])) {
    if (++digits > max_integer_digits)
      return std::nullopt;
    value = value * 10 + (str[pos] - '0');
    ++pos;
  }
  if (pos + 1 < str.size() && str[pos] == '.' && is_digit(str[pos + 1])) {
    ++pos;
    double scale = 0.1;
    while (pos < str.size() && is_digit(str[pos])) {
      value += (str[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
  }
  return value;
}

/// Parses "30", "20s", "2 minutes", "1m30s", "1 minute 30 seconds" at
/// `pos`. A bare number is `bare_unit_s` seconds each and must not continue
/// like a date or clock time ("2024-01-01", "12:30"); an unknown unit word
/// ("3 attempts") means this is not a duration.
std::optional<double> parse_duration(std::string_view str, std::size_t pos,
                                     double bare_unit_s) {
  double total = 0;
  bool any = false;
  while (pos < str.size() && is_digit(str[pos])) {
    auto value = parse_number(str, pos);
    if (!value)
      return std::nullopt;
    auto word_begin = skip_chars(str, pos, " \t");
    auto word_end = word_begin;
    while (word_end < str.size() && is_alpha(str[word_end]))
      ++word_end;
    auto word = str.substr(word_begin, word_end - word_begin);
    if (word.empty()) {
      if (any)
        break; // "1m 30": the trailing number has no unit, ignore it
      if (pos + 1 < str.size() &&
          std::string_view{"-:/.,"}.find(str[pos]) != std::string_view::npos &&
          is_digit(str[pos + 1]))
        return std::nullopt;
      return *value * bare_unit_s;
    }
    auto unit = unit_seconds(word);
    if (!unit) {
      if (any)
        break;
      return std::nullopt;
    }
    total += *value * *unit;
    any = true;
    pos = skip_chars(str, word_end, " \t,");
    if (auto after_and = match_word(str, pos, "and");
        after_and != std::string_view::npos)
      pos = skip_chars(str, after_and, " \t");
  }
  if (!any)
    return std::nullopt;
  return total;
}

} // namespace

std::vector<classifier_rule> default_classifier_rules() {
  // Patterns come from what the real CLIs print (claude 2.1, codex 0.169,
  // gemini 0.61) against each provider's real error answers; the saved logs
  // are tests/fixtures/agent-logs/ and tests/integration/agent_logs_test.cpp
  // keeps every one of them in the class a user wants. Order matters: the
  // first rule that matches wins.
  std::vector<classifier_rule> rules;
  auto add = [&](std::string id, error_class cls,
                 std::vector<std::string> patterns, std::size_t window) {
    classifier_rule r;
    r.id = std::move(id);
    r.cls = cls;
    r.patterns = std::move(patterns);
    r.window_lines = window;
    rules.push_back(std::move(r));
  };
  {
    classifier_rule r;
    r.id = "container_crash";
    r.cls = error_class::container_crash;
    r.oom_killed = true;
    r.exit_codes = {137};
    r.signals = {SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGKILL, SIGSEGV};
    rules.push_back(std::move(r));
  }
  // A per-minute window says the quota comes back soon, even when the same
  // message also mentions billing (Gemini's free tier does).
  add("rate_limit_per_minute", error_class::rate_limit,
      {R"(per.?minute)", R"(requests per min\b)", R"(please retry in)"}, 100);
  // Out of credit: this provider will not work until someone pays, but
  // another agent in the chain may (agent_failure falls back at once).
  add("billing", error_class::agent_failure,
      {R"(credit.?balance)", R"(insufficient.?quota)", R"(billing.?error)",
       R"(plan and billing)", R"(billing.?disabled)", R"(out of credits)"},
      50);
  add("rate_limit", error_class::rate_limit,
      {R"(rate.?limit)", R"(\b429\b)", R"(too.?many.?requests)",
       R"(quota.?exceeded)", R"(resource.?exhausted)"},
      100);
  add("fatal", error_class::fatal,
      {R"(authentication.?failed)", R"(invalid.?api.?key)",
       R"(permission.?denied)", R"(failed to authenticate)",
       R"(authentication.?error)", R"(incorrect api key)",
       R"(api key not valid)", R"(api.?key.?invalid)",
       R"((status|error|code)\W{0,3}40[13]\b)",
       R"(\b40[13] (unauthori[sz]ed|forbidden))", R"(\bunauthori[sz]ed\b)",
       R"(not logged in)", R"(please run /login)", R"(permission.?error)",
       R"(does not have (access|permission))", R"(invalid auth method)",
       R"(must specify the \w+ environment variable)",
       R"((missing|no) api.?key)"},
      50);
  // A CLI that cannot run (exit 126/127, an unknown flag, a directory it
  // refuses) is broken whatever else it printed.
  add("agent_failure", error_class::agent_failure,
      {R"(command.?not.?found)", R"(no such file.*{agent_cli})",
       R"(unknown option)", R"(unexpected argument)",
       R"(unrecognized (option|argument))", R"(not inside a trusted directory)",
       R"(not running in a trusted directory)", R"(requires --\w)",
       R"(missing optional dependency)", R"(cannot find module)"},
      50);
  rules.back().exit_codes = {126, 127};
  // Overload, server errors and network trouble fix themselves: retry with
  // their own rule id (no fatal or broken-CLI pattern overlaps them: see
  // agent_logs_test).
  add("transient", error_class::retryable,
      {R"(overloaded)", R"((status|error|code)\W{0,3}5(00|02|03|04|29)\b)",
       R"(\b5(02|03|04|29) (service|overloaded|bad gateway|gateway))",
       R"(service.?unavailable)", R"(high demand)", R"(at capacity)",
       R"(econnrefused|connection refused)",
       R"(econnreset|connection (dropped|reset|closed))",
       R"(stream disconnected)", R"(fetch failed)", R"(socket hang up)",
       R"(enotfound|eai_again|getaddrinfo|could not resolve host)",
       R"(waiting for network)", R"(etimedout|network.?error)"},
      50);
  return rules;
}

std::optional<double> parse_retry_after(std::string_view line) {
  for (std::size_t pos = 0; pos < line.size(); ++pos) {
    auto c = lower(line[pos]);
    if (c != 'r' && c != 't')
      continue;
    for (const auto& phrase : retry_phrases) {
      auto end = match_phrase(line, pos, phrase);
      if (end == std::string_view::npos)
        continue;
      // "Retry-After-Ms: 500" / "retry_after_ms=500": bare numbers are ms.
      double bare_unit_s = 1;
      if (auto ms = match_word(line, skip_chars(line, end, "-_"), "ms");
          ms != std::string_view::npos &&
          (ms == line.size() || !is_alpha(line[ms]))) {
        bare_unit_s = 0.001;
        end = ms;
      }
      auto value = parse_duration(line, skip_chars(line, end, value_separators),
                                  bare_unit_s);
      if (value && *value >= 0 && *value <= max_retry_after_s)
        return value;
    }
  }
  return std::nullopt;
}

/// One rule ready to match: its patterns without `{agent_cli}` compiled into
/// one alternation, and the templated ones kept as text for per-call
/// substitution.
struct compiled_rule {
  std::unique_ptr<RE2> fixed;
  std::string fixed_source;
  std::vector<std::string> templated;
};

/// Most agent-specific regexes kept at once. A node runs a handful of agents;
/// beyond this many names the cache starts over rather than grow.
constexpr std::size_t max_cached_agent_regexes = 256;

struct classifier::impl {
  std::vector<classifier_rule> rules;
  std::vector<compiled_rule> compiled;
  RE2::Options options = regex_options();

  /// Rules with `{agent_cli}` patterns, compiled per agent name (per rule
  /// index): compiling costs far more than matching a tail, and a node asks
  /// again and again for the same few agents. Not part of the classifier's
  /// value; guarded so one classifier can still be shared between threads.
  mutable std::mutex cache_mtx;
  mutable std::vector<
    std::map<std::string, std::shared_ptr<const RE2>, std::less<>>>
    per_agent;
  mutable std::size_t cached = 0;

  /// Rule `index`'s regex with `{agent_cli}` filled in with `agent_name`,
  /// regex-quoted; null when it does not compile.
  std::shared_ptr<const RE2> agent_regex(std::size_t index,
                                         std::string_view agent_name) const;
};

std::shared_ptr<const RE2>
classifier::impl::agent_regex(std::size_t index,
                              std::string_view agent_name) const {
  {
    std::lock_guard<std::mutex> guard{cache_mtx};
    auto& by_name = per_agent[index];
    if (auto i = by_name.find(agent_name); i != by_name.end())
      return i->second;
  }
  const auto& rule = compiled[index];
  auto quoted = RE2::QuoteMeta(piece(agent_name));
  auto source = rule.fixed_source;
  for (const auto& pattern : rule.templated)
    append_branch(source, substitute_agent(pattern, quoted));
  auto re = std::make_shared<const RE2>(piece(source), options);
  // Only an absurdly long agent name can fail here (max_mem); the templated
  // patterns then cannot match, the others still do.
  if (!re->ok())
    return nullptr;
  std::lock_guard<std::mutex> guard{cache_mtx};
  if (cached >= max_cached_agent_regexes) {
    for (auto& by_name : per_agent)
      by_name.clear();
    cached = 0;
  }
  if (per_agent[index].emplace(std::string{agent_name}, re).second)
    ++cached;
  return re;
}

namespace {

error rule_error(std::size_t index, std::string path, std::string what) {
  return error{"classifier rules",
               "/" + std::to_string(index) + std::move(path), std::move(what)};
}

std::string rule_label(const classifier_rule& rule) {
  return "rule '" + rule.id + "'";
}

/// A matching line: where it is in the tail and where the match starts in it.
struct line_hit {
  std::size_t index = 0;
  std::size_t offset = 0;
};

} // namespace

expected<classifier> classifier::make(std::vector<classifier_rule> rules) {
  auto ptr = std::make_shared<impl>();
  ptr->compiled.reserve(rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& rule = rules[i];
    if (rule.id.empty())
      return rule_error(i, "/id", "rule has an empty id");
    for (std::size_t k = 0; k < i; ++k)
      if (rules[k].id == rule.id)
        return rule_error(i, "/id",
                          "duplicate rule id '" + rule.id + "' (also rule " +
                            std::to_string(k) + ")");
    if (rule.exit_codes.empty() && !rule.oom_killed && rule.signals.empty() &&
        rule.patterns.empty())
      return rule_error(i, "",
                        rule_label(rule) +
                          " sets no criterion (exit_codes, oom_killed, "
                          "signals or patterns)");
    compiled_rule out;
    for (std::size_t j = 0; j < rule.patterns.size(); ++j) {
      const auto& pattern = rule.patterns[j];
      auto path = "/patterns/" + std::to_string(j);
      if (pattern.empty())
        return rule_error(i, path,
                          rule_label(rule) +
                            ": empty pattern (it would match every line)");
      auto templated = is_templated(pattern);
      auto source = templated
                      ? substitute_agent(pattern, std::string{sample_agent_cli})
                      : pattern;
      RE2 re{piece(source), ptr->options};
      if (!re.ok())
        return rule_error(i, path,
                          rule_label(rule) + ": invalid pattern '" + pattern +
                            "': " + re.error());
      if (templated)
        out.templated.push_back(pattern);
      else
        append_branch(out.fixed_source, pattern);
    }
    if (!out.fixed_source.empty()) {
      out.fixed = std::make_unique<RE2>(piece(out.fixed_source), ptr->options);
      if (!out.fixed->ok())
        return rule_error(i, "/patterns",
                          rule_label(rule) + ": patterns together too large: " +
                            out.fixed->error());
    }
    ptr->compiled.push_back(std::move(out));
  }
  ptr->per_agent.resize(rules.size());
  ptr->rules = std::move(rules);
  return classifier{std::move(ptr)};
}

classification classifier::classify(const attempt_outcome& outcome,
                                    std::string_view agent_cli) const {
  classification result;
  if (!outcome.infrastructure_error.empty()) {
    result.cls = error_class::infrastructure;
    result.rule = "infrastructure";
    result.line = display_line(outcome.infrastructure_error, 0);
    return result;
  }
  auto agent_name = basename_of(agent_cli);
  const auto& tail = outcome.tail;
  for (std::size_t i = 0; i < impl_->rules.size(); ++i) {
    const auto& rule = impl_->rules[i];
    const auto& compiled = impl_->compiled[i];
    bool any_cheap = false;
    bool all_cheap = true;
    auto check = [&](bool is_set, bool matched) {
      if (!is_set)
        return;
      any_cheap = any_cheap || matched;
      all_cheap = all_cheap && matched;
    };
    check(!rule.exit_codes.empty(),
          contains(rule.exit_codes, outcome.exit_code));
    check(rule.oom_killed.has_value(),
          rule.oom_killed && *rule.oom_killed == outcome.oom_killed);
    check(!rule.signals.empty(),
          outcome.signal != 0 && contains(rule.signals, outcome.signal));
    auto window_begin =
      rule.window_lines == 0 || rule.window_lines >= tail.size()
        ? std::size_t{0}
        : tail.size() - rule.window_lines;
    std::optional<line_hit> hit;
    bool matched = false;
    if (rule.match_all ? !all_cheap : any_cheap) {
      matched = !rule.match_all;
    } else if (rule.patterns.empty()) {
      // match_all with only cheap criteria, all of which matched.
      matched = rule.match_all;
    } else {
      // The patterns decide: scan the window, newest line first.
      const RE2* re = compiled.fixed.get();
      std::shared_ptr<const RE2> per_agent;
      if (!compiled.templated.empty() && !agent_name.empty()) {
        per_agent = impl_->agent_regex(i, agent_name);
        if (per_agent)
          re = per_agent.get();
      }
      if (re != nullptr) {
        for (auto k = tail.size(); k > window_begin; --k) {
          auto line = piece(tail[k - 1]);
          re2::StringPiece m;
          if (re->Match(line, 0, line.size(), RE2::UNANCHORED, &m, 1)) {
            hit =
              line_hit{k - 1, static_cast<std::size_t>(m.data() - line.data())};
            break;
          }
        }
      }
      matched = hit.has_value();
    }
    if (!matched)
      continue;
    result.cls = rule.cls;
    result.rule = rule.id;
    if (hit)
      result.line = display_line(tail[hit->index], hit->offset);
    if (rule.cls == error_class::rate_limit) {
      for (auto k = tail.size(); k > window_begin; --k) {
        if (auto hint = parse_retry_after(tail[k - 1])) {
          result.retry_after_s = hint;
          break;
        }
      }
    }
    return result;
  }
  result.cls = error_class::retryable;
  result.rule = "default";
  return result;
}

const std::vector<classifier_rule>& classifier::rules() const noexcept {
  return impl_->rules;
}

classifier::classifier(std::shared_ptr<const impl> ptr)
  : impl_(std::move(ptr)) {}

// Moves share the immutable implementation instead of emptying the source,
// so a moved-from classifier is still a valid one.
classifier::classifier(classifier&& other) noexcept : impl_(other.impl_) {}

classifier& classifier::operator=(classifier&& other) noexcept {
  impl_ = other.impl_;
  return *this;
}

classifier::classifier(const classifier&) = default;

classifier& classifier::operator=(const classifier&) = default;

classifier::~classifier() = default;

} // namespace tasksup
