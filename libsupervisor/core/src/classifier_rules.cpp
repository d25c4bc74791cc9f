// The node's default classifier rules: what the real agent CLIs print for
// each failure class, in the order they are tried (the first rule that
// matches wins). The matching itself is classifier.cpp.

#include "tasksup/supervisor/classifier.hpp"

#include <signal.h>

#include <string>
#include <vector>

namespace tasksup {

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
  // A usage or plan limit that resets at a known time: the account is
  // closed until then. Ahead of billing (Gemini's daily-quota message also
  // says "check your plan and billing details") and of the per-minute rule.
  // Claude: "You've hit your 5-hour limit · resets 3:10am (Europe/Berlin)";
  // codex: "You've hit your usage limit. ... or try again at Nov 28th, 2026
  // 2:10 AM."; gemini: "You have exhausted your daily quota on this model.";
  // qwen (OpenAI's usage_limit_reached): "The usage limit has been reached".
  // Claude's "monthly spend limit" is out of credit, not a quota.
  add("quota", error_class::quota_exhausted,
      {R"(you.{1,3}ve (hit|reached) your (usage|session|weekly|daily|)"
       R"(\d+.hour|opus|sonnet|fable|plan) limit)",
       R"(usage.?limit.?(reached|exceeded|has been reached))",
       R"(exhausted your (daily|weekly|monthly) quota)",
       R"(daily quota (exceeded|reached|exhausted))",
       R"(quota.?id\W+\w*per.?day)", R"(limit reached\|\d{9})"},
      100);
  // A per-minute window says the quota comes back soon, even when the same
  // message also mentions billing (Gemini's free tier does).
  add("rate_limit_per_minute", error_class::rate_limit,
      {R"(per.?minute)", R"(requests per min\b)", R"(please retry in)"}, 100);
  // Out of credit: this provider will not work until someone pays, but
  // another agent in the chain may (agent_failure falls back at once).
  add("billing", error_class::agent_failure,
      {R"(credit.?balance)", R"(insufficient.?quota)", R"(billing.?error)",
       R"(plan and billing)", R"(billing.?disabled)", R"(out of credits)",
       R"(spend limit)", R"(out of usage credits)"},
      50);
  add("rate_limit", error_class::rate_limit,
      {R"(rate.?limit)", R"(\b429\b)", R"(too.?many.?requests)",
       R"(quota.?exceeded)", R"(resource.?exhausted)"},
      100);
  // The agent waits for a person: it asked and read a closed stdin
  // (Python's input(), inquirer), asked for approval, or needs a login in a
  // browser (gemini: "Manual authorization is required but the current
  // session is non-interactive"). Ahead of fatal: that gemini message comes
  // as a FatalAuthenticationError. A missing key is fatal, not this.
  add("needs_input", error_class::needs_input,
      {R"(eof when reading a line)", R"(force closed the prompt)",
       R"(manual authorization is required)",
       R"(in an interactive terminal to log in)",
       R"((requires|waiting for|awaiting|needs) (your |user )?approval)",
       R"(approval (is )?required)", R"(interactive (login|authentication))",
       R"(stdin is not a tty|not a terminal.{0,40}prompt)",
       R"(do you want to (proceed|continue)\?\s*(\[y/n\])?\s*$)",
       R"(\[y/n\]\s*$)"},
      20);
  add("fatal", error_class::fatal,
      {R"(authentication.?failed)",
       R"(invalid.?api.?key)",
       R"(permission.?denied)",
       R"(failed to authenticate)",
       R"(authentication.?error)",
       R"(incorrect api key)",
       R"(api key not valid)",
       R"(api.?key.?invalid)",
       R"((status|error|code)\W{0,3}40[13]\b)",
       R"(\b40[13] (unauthori[sz]ed|forbidden))",
       R"(\bunauthori[sz]ed\b)",
       R"(not logged in)",
       R"(please run /login)",
       R"(permission.?error)",
       R"(does not have (access|permission))",
       R"(invalid auth method)",
       R"(must specify the \w+ environment variable)",
       R"((missing|no) api.?key)",
       R"(please set an auth method)",
       R"(no auth type is selected)",
       R"(missing environment variable\W{0,3}\w*(key|token))",
       R"(x-api-key header is required)",
       R"(didn.?t provide an api key)"},
      50);
  // A CLI that cannot run (exit 126/127, an unknown flag, a directory it
  // refuses, an npm install without its platform package: codex's "Missing
  // optional dependency @openai/codex-linux-x64", claude 2.x's "Error:
  // claude native binary not installed.") is broken whatever else it
  // printed.
  add("agent_failure", error_class::agent_failure,
      {R"(command.?not.?found)", R"(no such file.*{agent_cli})",
       R"(unknown option)", R"(unexpected argument)",
       R"(unrecognized (option|argument))", R"(not inside a trusted directory)",
       R"(not running in a trusted directory)", R"(requires --\w)",
       R"(missing optional dependency)", R"(cannot find module)",
       R"(native binary not installed)"},
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

} // namespace tasksup
