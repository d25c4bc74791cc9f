// `tasksup classify`: classifies an exit status and a log the way the
// supervisor would, and explains the result.

#include "commands.hpp"
#include "log_tail.hpp"
#include "safe_text.hpp"

#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/config.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace tasksup::app {

namespace {

/// Lines of the log kept at most (rules with a window of 0, "all lines", see
/// this many); the runtimes keep a tail of the same order.
constexpr std::size_t max_tail_lines = 1000;

/// Bytes kept of each log line.
constexpr std::size_t max_line_bytes = 4096;

struct options {
  int exit_code = 0;
  int signal = 0;
  bool oom = false;
  std::string agent_cli;
  std::string rules_file;
  bool json = false;
  std::string log = "-";
  /// Unix time to classify at (a quota's "resets 3pm" is read against it);
  /// unset: the wall clock.
  std::optional<int64_t> now_unix;
};

/// "2026-11-28T02:10:37Z".
std::string iso_utc(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr)
    return "?";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// "2h13m", "3d4h", "45s".
std::string short_duration(double seconds) {
  auto s = static_cast<int64_t>(seconds);
  auto d = s / 86400;
  auto h = s % 86400 / 3600;
  auto m = s % 3600 / 60;
  std::string out;
  if (d > 0)
    out += std::to_string(d) + "d";
  if (h > 0 || d > 0)
    out += std::to_string(h) + "h";
  if (d == 0)
    out += std::to_string(m) + "m";
  if (s < 60)
    out = std::to_string(s) + "s";
  return out;
}

/// When a quota's account comes back, for a class that has a reset.
std::optional<std::chrono::system_clock::time_point>
reset_time(const classification& c, std::chrono::system_clock::time_point now) {
  if (c.cls != error_class::quota_exhausted || !c.retry_after_s)
    return std::nullopt;
  return now + std::chrono::seconds{static_cast<int64_t>(*c.retry_after_s)};
}

/// The lines the widest rule window needs, within `max_tail_lines`.
std::size_t tail_lines_needed(const std::vector<classifier_rule>& rules) {
  std::size_t needed = 1;
  for (const auto& rule : rules) {
    auto window = rule.window_lines == 0 ? max_tail_lines : rule.window_lines;
    needed = std::max(needed, std::min(window, max_tail_lines));
  }
  return needed;
}

void print_json(const std::string& cls, const classification* c,
                std::chrono::system_clock::time_point now) {
  boost::json::object out;
  out["class"] = cls;
  if (c != nullptr && !c->rule.empty())
    out["rule"] = utf8_or_escaped(c->rule);
  else
    out["rule"] = nullptr;
  if (c != nullptr && !c->line.empty())
    out["line"] = utf8_or_escaped(c->line);
  else
    out["line"] = nullptr;
  if (c != nullptr && c->retry_after_s)
    out["retry_after_s"] = *c->retry_after_s;
  else
    out["retry_after_s"] = nullptr;
  if (c != nullptr && c->cls == error_class::quota_exhausted) {
    if (auto at = reset_time(*c, now))
      out["reset_at"] = iso_utc(*at);
    else
      out["reset_at"] = nullptr;
  }
  std::cout << boost::json::serialize(out) << '\n';
}

void print_human(const classification& c,
                 std::chrono::system_clock::time_point now) {
  std::cout << "class: " << to_string(c.cls) << '\n';
  std::cout << "rule: " << printable(c.rule) << '\n';
  if (c.line.empty())
    std::cout << "line: (none: matched on exit code, signal or OOM flag, or "
                 "by default)\n";
  else
    std::cout << "line: " << printable(c.line) << '\n';
  if (c.cls == error_class::quota_exhausted) {
    if (auto at = reset_time(c, now))
      std::cout << "quota resets in " << short_duration(*c.retry_after_s)
                << " (at " << iso_utc(*at) << ")\n";
    else
      std::cout << "quota resets: (no reset time in the output)\n";
  } else if (c.retry_after_s) {
    std::cout << "retry after: " << *c.retry_after_s << " s\n";
  }
}

int run(const options& opts) {
  auto rules = default_classifier_rules();
  if (!opts.rules_file.empty()) {
    auto doc = read_json_file(opts.rules_file);
    if (!doc) {
      std::cerr << "tasksup classify: " << doc.error().to_string() << '\n';
      return exit_status::bad_input;
    }
    auto parsed = parse_classifier_rules(*doc, opts.rules_file);
    if (!parsed) {
      std::cerr << "tasksup classify: " << parsed.error().to_string() << '\n';
      return exit_status::bad_input;
    }
    rules = std::move(*parsed);
  }
  auto cls = classifier::make(rules);
  if (!cls) {
    std::cerr << "tasksup classify: " << cls.error().to_string() << '\n';
    return exit_status::bad_input;
  }
  // Read the whole log even for exit 0: a missing file is still bad input,
  // and a writer piping into us should not die of SIGPIPE.
  log_tail tail{tail_lines_needed(rules), max_line_bytes};
  bool from_stdin = opts.log == "-";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{nullptr, &std::fclose};
  if (!from_stdin) {
    file.reset(std::fopen(opts.log.c_str(), "rb"));
    if (!file) {
      std::cerr << "tasksup classify: cannot open " << opts.log << ": "
                << std::strerror(errno) << '\n';
      return exit_status::bad_input;
    }
  }
  auto read_error = read_into(from_stdin ? stdin : file.get(), tail);
  if (!read_error.empty()) {
    std::cerr << "tasksup classify: cannot read "
              << (from_stdin ? std::string{"standard input"} : opts.log) << ": "
              << read_error << '\n';
    return exit_status::bad_input;
  }
  attempt_outcome outcome;
  outcome.exit_code = opts.exit_code;
  outcome.signal = opts.signal;
  outcome.oom_killed = opts.oom;
  outcome.tail = tail.lines();
  auto now = opts.now_unix
               ? std::chrono::system_clock::time_point{std::chrono::seconds{
                   *opts.now_unix}}
               : std::chrono::system_clock::now();
  if (outcome.succeeded()) {
    if (opts.json)
      print_json("success", nullptr, now);
    else
      std::cout << "success (exit 0 is never classified)\n";
    return exit_status::ok;
  }
  auto result = cls->classify(outcome, opts.agent_cli, now);
  if (opts.json)
    print_json(std::string{to_string(result.cls)}, &result, now);
  else
    print_human(result, now);
  return exit_status::ok;
}

void setup(CLI::App& app, int& status) {
  auto* cmd = app.add_subcommand(
    "classify", "Classify an exit status and its log like the supervisor "
                "does, and show the rule and line that decided.");
  auto opts = std::make_shared<options>();
  cmd
    ->add_option("--exit-code", opts->exit_code,
                 "Exit code of the attempt (128+N when killed by signal N)")
    ->required()
    ->check(CLI::Range(0, 255));
  cmd
    ->add_option("--signal", opts->signal,
                 "Signal that killed the process (0: none)")
    ->check(CLI::Range(0, 64));
  cmd->add_flag("--oom", opts->oom, "The attempt was killed for memory");
  cmd->add_option("--agent-cli", opts->agent_cli,
                  "Agent command, for rules using {agent_cli}");
  cmd
    ->add_option("--rules", opts->rules_file,
                 "Classifier rules file ({\"rules\": [...]}); default: the "
                 "built-in rules (as in config/classifier.json)")
    ->type_name("FILE");
  cmd->add_flag("--json", opts->json,
                "Print one JSON object {class, rule, line, retry_after_s}, "
                "plus reset_at (UTC, ISO 8601) for quota_exhausted");
  cmd
    ->add_option("--now", opts->now_unix,
                 "Classify as if at this Unix time (a quota's \"resets 3pm\" "
                 "is the next 3pm after it); default: now")
    ->check(CLI::Range(int64_t{0}, int64_t{253402300799}));
  cmd->add_option("log", opts->log, "Log file; - or none reads stdin")
    ->type_name("LOGFILE|-");
  cmd->footer(
    "Only the end of the log matters (each rule looks at its last "
    "window_lines lines), so the log is streamed and only its last "
    "lines are kept, each cut to 4096 bytes: any size of input, "
    "binary included, is fine. Exit code 0 is success and never "
    "classified, even with --oom. For quota_exhausted, retry_after_s is "
    "the seconds until the quota resets (at most 7 days). Exit status: 0 after "
    "classifying, 2 for bad flags or an unreadable log or rules "
    "file.");
  cmd->callback([opts, &status] { status = run(*opts); });
}

const command_registrar registrar{30, setup};

} // namespace

} // namespace tasksup::app
