// libFuzzer harness for the classifier: arbitrary bytes become output lines,
// an agent name, an outcome and a custom pattern; invariants a user relies on
// are checked with abort() so the fuzzer reports them as crashes.

#include "tasksup/supervisor/classifier.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace tasksup;

namespace {

void require(bool condition) {
  if (!condition)
    std::abort();
}

const classifier& default_set() {
  static const classifier instance = [] {
    auto made = classifier::make(default_classifier_rules());
    require(made.has_value());
    return std::move(made).value();
  }();
  return instance;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    auto end = text.find('\n', begin);
    if (end == std::string_view::npos)
      end = text.size();
    lines.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

bool is_known_rule(const classification& c, const classifier& cls) {
  if (c.rule == "default" || c.rule == "infrastructure")
    return true;
  for (const auto& rule : cls.rules())
    if (rule.id == c.rule)
      return true;
  return false;
}

void check(const classification& c, const classifier& cls,
           const attempt_outcome& out) {
  require(is_known_rule(c, cls));
  require(c.line.size() <= max_display_line_bytes + 6);
  // A short matched line is reported exactly as it was in the output.
  if (!c.line.empty() && c.line.size() < max_display_line_bytes &&
      c.rule != "infrastructure") {
    bool found = false;
    for (const auto& line : out.tail)
      found = found || line == c.line;
    require(found);
  }
  if (c.retry_after_s)
    require((c.cls == error_class::rate_limit && *c.retry_after_s >= 0 &&
             *c.retry_after_s <= 86400) ||
            (c.cls == error_class::quota_exhausted && *c.retry_after_s >= 0 &&
             *c.retry_after_s <= max_quota_reset_s));
}

/// A fixed wall-clock time for quota resets: 2026-11-27T23:29:00Z.
const std::chrono::system_clock::time_point fuzz_now{
  std::chrono::seconds{1795822140}};

void check_hint(std::string_view text) {
  if (auto hint = parse_retry_after(text))
    require(*hint >= 0 && *hint <= 86400);
  if (auto reset = parse_quota_reset(text, fuzz_now))
    require(*reset >= 0 && *reset <= max_quota_reset_s);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 4)
    return 0;
  // Header: exit code, signal, flags (OOM, infrastructure, agent choice).
  attempt_outcome out;
  out.exit_code = data[0];
  out.signal = data[1] % 40;
  auto flags = data[2];
  out.oom_killed = (flags & 1) != 0;
  std::string_view body{reinterpret_cast<const char*>(data + 3), size - 3};
  out.tail = split_lines(body);
  // The first line doubles as the agent name and as a custom pattern.
  std::string agent = (flags & 2) ? out.tail.front() : std::string{};
  if ((flags & 4) && out.tail.size() > 1)
    out.infrastructure_error = out.tail[1];

  check(default_set().classify(out, agent, fuzz_now), default_set(), out);

  classifier_rule custom;
  custom.id = "custom";
  custom.cls = (flags & 8) ? error_class::rate_limit : error_class::fatal;
  custom.patterns = {out.tail.front(), "x{agent_cli}y"};
  custom.exit_codes = {out.exit_code ^ 1};
  custom.match_all = (flags & 16) != 0;
  custom.window_lines = flags >> 5;
  auto made = classifier::make({custom});
  if (made)
    check(made->classify(out, agent, fuzz_now), *made, out);
  else
    require(!made.error().what.empty() &&
            made.error().path.rfind("/0", 0) == 0);

  check_hint(body);
  for (const auto& line : out.tail)
    check_hint(line);
  return 0;
}
