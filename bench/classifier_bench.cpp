// Classifier cost (issue 6, item 4): the default rules over a
// 100-line tail and over a 10 MB log, against a naive per-line, per-pattern
// std::regex search of the same rules over the same lines in the same run.
//
// The 10 MB log is measured two ways: streamed through output_capture (the
// runtime's bounded tail, what an attempt's classification actually sees)
// and then classified, and classified over every line (the default rules with
// their windows widened to the whole log), which is the matching engine's
// worst case.
//
// With --tasksup=<binary> it also times `tasksup classify` on the same log
// written to a file (the command's own streaming tail, end to end).
//
// The 100-line tails are also classified by the engine before issue 17
// (tests/unit/classifier_reference.hpp: rule after rule, line by line), the
// two sides alternating in `--rounds` rounds; the figures are the medians.
// `--only=new|old --calls=N [--case=nomatch|ratelimit]` just classifies one
// tail N times, for counting instructions per call under callgrind
// (scripts/bench.sh).
//
//   bench_classifier [--tail-seconds=2] [--rounds=5] [--log-mb=10]
//   [--tasksup=build/apps/tasksup] [--only=new|old --calls=N]

#include "bench_util.hpp"
#include "spawn_loop.hpp"

#include "classifier_reference.hpp"

#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/supervisor/classifier.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace {

using namespace tasksup;
using namespace tasksup::bench;

/// Deterministic xorshift generator, so every run sees the same log.
struct xorshift {
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

constexpr const char* words[] = {
  "compiling", "tests",   "module",  "patch",  "applied", "reading",
  "file",      "context", "tokens",  "model",  "request", "response",
  "diff",      "hunk",    "updated", "config", "running", "step",
  "analysis",  "import",  "symbol",  "index",  "cache",   "warm",
};

/// One plausible agent output line (timestamp, level, words, numbers) that
/// none of the default patterns matches: numbers stay below 400, so the
/// whole number 429 never appears.
std::string make_line(xorshift& rng, std::size_t n) {
  std::string line = "2024-05-01T12:";
  line += std::to_string(10 + rng.below(50));
  line += ':';
  line += std::to_string(10 + rng.below(50));
  line += rng.below(4) == 0 ? "Z WARN " : "Z INFO ";
  auto count = 6 + rng.below(10);
  for (std::uint64_t i = 0; i < count; ++i) {
    line += words[rng.below(std::size(words))];
    line += i % 3 == 2 ? " " + std::to_string(rng.below(400)) + " " : " ";
  }
  line += "#";
  line += std::to_string(n % 400);
  return line;
}

/// The naive baseline: every pattern a std::regex (ECMAScript, icase),
/// compiled once; classification searches each line of a rule's window,
/// newest first, with each of its patterns in turn.
struct naive_rule {
  std::size_t window_lines = 0;
  std::vector<std::regex> patterns;
  bool cheap = false;
};

std::vector<naive_rule> make_naive(const std::vector<classifier_rule>& rules,
                                   const std::string& agent_cli) {
  std::vector<naive_rule> out;
  for (const auto& rule : rules) {
    naive_rule n;
    n.window_lines = rule.window_lines;
    n.cheap = rule.patterns.empty();
    for (auto pattern : rule.patterns) {
      auto at = pattern.find("{agent_cli}");
      if (at != std::string::npos)
        pattern.replace(at, 11, agent_cli);
      n.patterns.emplace_back(pattern, std::regex::ECMAScript |
                                         std::regex::icase |
                                         std::regex::optimize);
    }
    out.push_back(std::move(n));
  }
  return out;
}

/// Index of the first naive rule whose patterns match in its window (the
/// cheap criteria of the benchmark's outcome never match), or -1.
int naive_classify(const std::vector<naive_rule>& rules,
                   const std::vector<std::string>& tail) {
  for (std::size_t r = 0; r < rules.size(); ++r) {
    const auto& rule = rules[r];
    if (rule.cheap)
      continue;
    auto begin = rule.window_lines == 0 || rule.window_lines >= tail.size()
                   ? std::size_t{0}
                   : tail.size() - rule.window_lines;
    for (auto k = tail.size(); k > begin; --k)
      for (const auto& re : rule.patterns)
        if (std::regex_search(tail[k - 1], re))
          return static_cast<int>(r);
  }
  return -1;
}

/// Runs `fn` repeatedly for about `seconds` (at least `min_iters` times);
/// returns seconds per call.
template<class F>
double per_call(double seconds, std::uint64_t min_iters, F&& fn) {
  std::uint64_t iters = 0;
  auto start = bench_clock::now();
  while (iters < min_iters || seconds_since(start) < seconds) {
    fn();
    ++iters;
  }
  return seconds_since(start) / static_cast<double>(iters);
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_classifier: %s\n", what.c_str());
  std::exit(1);
}

} // namespace

int main(int argc, char** argv) {
  auto tail_seconds =
    static_cast<double>(arg_u64(argc, argv, "tail-seconds", 2));
  auto log_mb = arg_u64(argc, argv, "log-mb", 10);
  auto tasksup_bin = arg_str(argc, argv, "tasksup", "");
  auto rounds = std::max<std::uint64_t>(1, arg_u64(argc, argv, "rounds", 5));
  auto only = arg_str(argc, argv, "only", "");
  auto calls = arg_u64(argc, argv, "calls", 1000);
  auto tail_case = arg_str(argc, argv, "case", "nomatch");
  const std::string agent_cli = "codex";

  auto rules = default_classifier_rules();
  auto made = classifier::make(rules);
  if (!made)
    die("default rules do not compile");
  const classifier& cls = *made;
  auto naive = make_naive(rules, agent_cli);

  xorshift rng;
  std::uint64_t line_no = 0;

  // --- 100-line tail, nothing matches: every window is scanned in full.
  attempt_outcome tail100;
  tail100.exit_code = 1;
  for (int i = 0; i < 100; ++i)
    tail100.tail.push_back(make_line(rng, line_no++));
  if (auto c = cls.classify(tail100, agent_cli, {}); c.rule != "default")
    die("generated tail matched rule " + c.rule);
  if (naive_classify(naive, tail100.tail) != -1)
    die("naive baseline matched the generated tail");
  attempt_outcome limited = tail100;
  limited.tail[70] =
    "Error: 429 Too Many Requests (rate limit), retry after 20s";
  // The baseline answers with a rule index: the one named rate_limit.
  auto rate_limit_index =
    static_cast<int>(std::find_if(rules.begin(), rules.end(),
                                  [](const classifier_rule& r) {
                                    return r.id == "rate_limit";
                                  }) -
                     rules.begin());
  if (cls.classify(limited, agent_cli, {}).rule != "rate_limit" ||
      naive_classify(naive, limited.tail) != rate_limit_index)
    die("rate-limit tail not classified as rate_limit");
  reference::classifier before{rules};
  std::size_t sink = 0;

  if (!only.empty()) {
    // Instructions per call: run under callgrind with --calls=0 and N.
    const auto& input = tail_case == "ratelimit" ? limited : tail100;
    for (std::uint64_t i = 0; i < calls; ++i)
      sink += only == "old" ? before.classify(input, agent_cli, {}).rule.size()
                            : cls.classify(input, agent_cli, {}).rule.size();
    std::printf("RESULT name=classifier_calls only=%s calls=%llu sink=%zu\n",
                only.c_str(), static_cast<unsigned long long>(calls), sink);
    return 0;
  }

  // Before (the old engine) and after, alternating, `rounds` times each.
  std::vector<double> old_tail, new_tail, old_limited, new_limited;
  auto slice = tail_seconds / static_cast<double>(rounds);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    old_tail.push_back(per_call(slice, 100, [&] {
      sink += before.classify(tail100, agent_cli, {}).rule.size();
    }));
    new_tail.push_back(per_call(slice, 100, [&] {
      sink += cls.classify(tail100, agent_cli, {}).rule.size();
    }));
    old_limited.push_back(per_call(slice, 100, [&] {
      sink += before.classify(limited, agent_cli, {}).rule.size();
    }));
    new_limited.push_back(per_call(slice, 100, [&] {
      sink += cls.classify(limited, agent_cli, {}).rule.size();
    }));
  }
  for (std::uint64_t r = 0; r < rounds; ++r)
    std::printf("round %llu: tail100 nomatch old %.2f us new %.2f us; "
                "rate_limit at -30 old %.2f us new %.2f us\n",
                static_cast<unsigned long long>(r + 1), old_tail[r] * 1e6,
                new_tail[r] * 1e6, old_limited[r] * 1e6, new_limited[r] * 1e6);
  auto re2_tail = median(new_tail);
  auto re2_tail_old = median(old_tail);
  auto re2_limited = median(new_limited);
  auto re2_limited_old = median(old_limited);
  // The same without an agent name: the templated `{agent_cli}` pattern is
  // then left out.
  auto re2_tail_noagent = per_call(tail_seconds, 100, [&] {
    sink += cls.classify(tail100, "", {}).rule.size();
  });
  auto naive_tail = per_call(tail_seconds, 10, [&] {
    sink += static_cast<std::size_t>(naive_classify(naive, tail100.tail) + 1);
  });
  std::printf("tail100 nomatch: new %.2f us  old %.2f us (%.1fx)  "
              "new(no agent_cli) %.2f us  std::regex %.2f us  ratio %.1fx\n",
              re2_tail * 1e6, re2_tail_old * 1e6, re2_tail_old / re2_tail,
              re2_tail_noagent * 1e6, naive_tail * 1e6, naive_tail / re2_tail);
  auto naive_limited = per_call(tail_seconds, 10, [&] {
    sink += static_cast<std::size_t>(naive_classify(naive, limited.tail) + 1);
  });
  std::printf("tail100 rate_limit at -30: new %.2f us  old %.2f us (%.1fx)  "
              "std::regex %.2f us  ratio %.1fx\n",
              re2_limited * 1e6, re2_limited_old * 1e6,
              re2_limited_old / re2_limited, naive_limited * 1e6,
              naive_limited / re2_limited);

  // --- A log of `log_mb` MB.
  std::string log;
  std::vector<std::string> all_lines;
  const std::size_t log_bytes = log_mb * 1000 * 1000;
  while (log.size() < log_bytes) {
    auto line = make_line(rng, line_no++);
    log += line;
    log += '\n';
    all_lines.push_back(std::move(line));
  }

  // Streamed through the runtime's output capture (no log file, no line
  // consumer), then the kept tail classified.
  auto stream_start = bench_clock::now();
  auto capture = runtime::output_capture::create("", nullptr);
  if (!capture)
    die("output_capture: " + capture.error().what);
  constexpr std::size_t chunk = 64 * 1024;
  for (std::size_t at = 0; at < log.size(); at += chunk)
    capture->feed(std::string_view{log}.substr(at, chunk));
  capture->finish();
  attempt_outcome streamed;
  streamed.exit_code = 1;
  streamed.tail = capture->tail();
  auto streamed_class = cls.classify(streamed, agent_cli, {});
  auto stream_s = seconds_since(stream_start);
  if (streamed_class.rule != "default")
    die("streamed log matched rule " + streamed_class.rule);
  std::printf("log %.1f MB (%zu lines) streamed + tail classified: %.1f ms "
              "(%.0f MB/s)\n",
              static_cast<double>(log.size()) / 1e6, all_lines.size(),
              stream_s * 1e3, static_cast<double>(log.size()) / 1e6 / stream_s);

  // Every line classified: the default rules with windows over the whole log.
  auto wide_rules = rules;
  for (auto& rule : wide_rules)
    rule.window_lines = 0;
  auto wide = classifier::make(wide_rules);
  if (!wide)
    die("widened rules do not compile");
  auto wide_naive = make_naive(wide_rules, agent_cli);
  attempt_outcome whole;
  whole.exit_code = 1;
  whole.tail = all_lines;
  auto full_start = bench_clock::now();
  auto full_class = wide->classify(whole, agent_cli, {});
  auto full_s = seconds_since(full_start);
  if (full_class.rule != "default")
    die("full log matched rule " + full_class.rule);
  auto naive_start = bench_clock::now();
  auto naive_full = naive_classify(wide_naive, whole.tail);
  auto naive_full_s = seconds_since(naive_start);
  if (naive_full != -1)
    die("naive baseline matched the full log");
  std::printf("log all lines: re2 %.1f ms (%.0f MB/s)  std::regex %.1f ms "
              "(%.1f MB/s)  ratio %.1fx\n",
              full_s * 1e3, static_cast<double>(log.size()) / 1e6 / full_s,
              naive_full_s * 1e3,
              static_cast<double>(log.size()) / 1e6 / naive_full_s,
              naive_full_s / full_s);
  if (sink == 0)
    std::printf("(unreachable)\n");

  // The real `tasksup classify` on the same log written to a file, when its
  // binary is given: process start, config, reading through its bounded
  // tail, classification and output, end to end.
  double cli_ms = -1;
  if (!tasksup_bin.empty()) {
    auto path = std::filesystem::temp_directory_path() /
                ("tasksup-bench-" + std::to_string(::getpid()) + ".log");
    {
      std::ofstream out{path, std::ios::binary};
      out << log;
    }
    std::vector<std::string> cli = {tasksup_bin,  "classify",    "--exit-code",
                                    "1",          "--agent-cli", agent_cli,
                                    path.string()};
    auto cli_start = bench_clock::now();
    auto rc = run_quietly(cli);
    cli_ms = seconds_since(cli_start) * 1e3;
    std::filesystem::remove(path);
    if (rc != 0)
      die("tasksup classify exited " + std::to_string(rc));
    std::printf("tasksup classify of the %.1f MB log file: %.1f ms\n",
                static_cast<double>(log.size()) / 1e6, cli_ms);
  }

  result_line{"classifier"}
    .fixed("tail100_us", re2_tail * 1e6, 2)
    .fixed("tail100_old_us", re2_tail_old * 1e6, 2)
    .fixed("tail100_noagent_us", re2_tail_noagent * 1e6, 2)
    .fixed("tail100_stdregex_us", naive_tail * 1e6, 2)
    .fixed("tail100_ratio", naive_tail / re2_tail, 1)
    .fixed("tail100_ratelimit_us", re2_limited * 1e6, 2)
    .fixed("tail100_ratelimit_old_us", re2_limited_old * 1e6, 2)
    .fixed("tail100_ratelimit_stdregex_us", naive_limited * 1e6, 2)
    .add("log_bytes", log.size())
    .fixed("log_stream_ms", stream_s * 1e3, 1)
    .fixed("log_all_lines_ms", full_s * 1e3, 1)
    .fixed("log_all_lines_stdregex_ms", naive_full_s * 1e3, 1)
    .fixed("log_all_lines_ratio", naive_full_s / full_s, 1)
    .fixed("tasksup_classify_ms", cli_ms, 1)
    .print();
  return 0;
}
