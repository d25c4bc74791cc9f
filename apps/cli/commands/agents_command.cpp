// `tasksup agents`: how each agent has been doing on a node, and the order
// a fallback chain should try them in.

#include "commands.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"

#include "tasksup/actors/protocol.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct agents_options {
  std::string node;
  std::string window = "24h";
  bool json = false;
};

/// "90s", "30m", "24h", "7d", plain seconds, or "all" (0).
std::optional<double> parse_window(const std::string& text) {
  if (text == "all")
    return 0.0;
  if (text.empty())
    return std::nullopt;
  double unit = 1;
  auto digits = text;
  switch (text.back()) {
    case 's':
      digits.pop_back();
      break;
    case 'm':
      unit = 60;
      digits.pop_back();
      break;
    case 'h':
      unit = 3600;
      digits.pop_back();
      break;
    case 'd':
      unit = 86400;
      digits.pop_back();
      break;
    default:
      break;
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return (c >= '0' && c <= '9') || c == '.';
      }))
    return std::nullopt;
  char* end = nullptr;
  auto x = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !(x > 0) || x * unit > 1e9)
    return std::nullopt;
  return x * unit;
}

std::string str(const boost::json::value& v, std::string_view key) {
  if (auto* o = v.if_object())
    if (auto* x = o->if_contains(key); x && x->is_string())
      return std::string{x->get_string()};
  return {};
}

double num(const boost::json::value& v, std::string_view key) {
  if (auto* o = v.if_object())
    if (auto* x = o->if_contains(key); x && x->is_number())
      return x->to_number<double>();
  return 0;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1fs" : "%.0fs", s);
  return buf;
}

std::string iso8601(double ts) {
  auto t = static_cast<std::time_t>(ts);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// The tasks that restart often (a node before this list has none).
void print_restarting(const boost::json::value& doc) {
  auto* obj = doc.if_object();
  auto* list = obj ? obj->if_contains("restarting") : nullptr;
  if (list == nullptr || !list->is_array() || list->get_array().empty())
    return;
  auto now = num(doc, "now");
  auto count = static_cast<long long>(num(doc, "restarting_count"));
  std::cout << "\nRestarting often (3 or more new attempts in the last hour";
  if (count > static_cast<long long>(list->get_array().size()))
    std::cout << "; the " << list->get_array().size() << " most of " << count;
  std::cout << "):\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"  TASK", "AGENT", "RESTARTS", "LAST RESTART", "RECOVERY"});
  for (auto& r : list->get_array()) {
    std::string recovery = "-";
    auto* ro = r.if_object();
    if (auto* f = ro ? ro->if_contains("failing_since_ts") : nullptr;
        f && f->is_number())
      recovery =
        "failing for " + secs(std::max(0.0, now - num(r, "failing_since_ts")));
    else if (auto* l = ro ? ro->if_contains("last_recovery_s") : nullptr;
             l && l->is_number())
      recovery = "recovered in " + secs(num(r, "last_recovery_s"));
    rows.push_back(
      {"  " + cell(str(r, "task_id")), cell(str(r, "agent_id")),
       std::to_string(static_cast<long long>(num(r, "restarts_last_hour"))),
       iso8601(num(r, "last_restart_ts")), recovery});
  }
  print_columns(std::cout, rows);
}

void print_table(const boost::json::value& doc) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"AGENT", "SUCCESS", "ATTEMPTS", "MEDIAN", "P90",
                  "FAILURE CLASSES", "BREAKER", "LAST FAILURE"});
  auto* agents = doc.at("agents").if_array();
  for (auto& a : agents ? *agents : boost::json::array{}) {
    std::string classes;
    if (auto* fc = a.at("failure_classes").if_object())
      for (auto& kv : *fc) {
        if (!classes.empty())
          classes += ", ";
        classes += std::string{kv.key()} + " " +
                   std::to_string(kv.value().to_number<long long>());
      }
    std::string last = "-";
    auto& lf = a.at("last_failure");
    if (lf.is_object()) {
      last = iso8601(num(lf, "ts")) + " " + str(lf, "class");
      auto line = str(lf, "line");
      if (line.size() > 50)
        line = line.substr(0, 47) + "...";
      if (!line.empty())
        last += ": " + line;
    }
    auto judged = num(a, "succeeded") + num(a, "failed");
    rows.push_back({cell(str(a, "agent_id")),
                    judged > 0 ? std::to_string(static_cast<int>(
                                   std::lround(num(a, "success_rate") * 100))) +
                                   "%"
                               : "-",
                    std::to_string(static_cast<int>(num(a, "attempts"))),
                    secs(num(a, "median_duration_s")),
                    secs(num(a, "p90_duration_s")), cell(classes),
                    cell(str(a, "breaker")), cell(last)});
  }
  print_columns(std::cout, rows);
  auto* order = doc.at("fallback_order").if_array();
  if (!order || order->empty())
    return;
  std::cout << "\nSuggested fallback order:\n";
  int n = 0;
  for (auto& s : *order)
    std::cout << "  " << ++n << ". " << cell(str(s, "agent_id")) << ": "
              << cell(str(s, "why")) << '\n';
}

int agents(const agents_options& opts) {
  auto window = parse_window(opts.window);
  if (!window) {
    std::cerr << "tasksup agents: --window: expected a duration such as "
                 "90s, 30m, 24h, 7d, or all; got '"
              << opts.window << "'\n";
    return exit_status::bad_input;
  }
  return with_node("agents", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    s.self->request(s.node, node_request_timeout, agents_atom::value, *window)
      .receive(
        [&](std::string& text) {
          if (opts.json) {
            std::cout << text << '\n';
            return;
          }
          boost::system::error_code ec;
          auto doc = boost::json::parse(text, ec);
          if (ec || !doc.is_object()) {
            std::cerr << "tasksup agents: the node's answer is not JSON\n";
            rc = exit_status::unavailable;
            return;
          }
          if (doc.at("agents").as_array().empty())
            std::cout << "no attempts in the window\n";
          else
            print_table(doc);
          print_restarting(doc);
        },
        [&](caf::error& err) {
          rc = report_request_error(s, err, exit_status::unavailable);
        });
    return rc;
  });
}

void setup_agents(CLI::App& app, int& status) {
  auto opts = std::make_shared<agents_options>();
  auto* cmd = app.add_subcommand(
    "agents", "Show how each agent has been doing on a node: success rate, "
              "attempts, median and p90 duration, failure classes, last "
              "failure, a suggested fallback order, and the tasks that "
              "restart often.");
  cmd
    ->add_option("--window", opts->window,
                 "Only attempts that ended within this long: 90s, 30m, 24h, "
                 "7d, or all")
    ->capture_default_str();
  cmd->add_flag("--json", opts->json,
                "Print the node's JSON: agents[] with the figures, "
                "fallback_order[] with the reason for each place, and "
                "restarting[] (restarting_count in all)");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Figures come from the node's event stream: every attempt that ended, with
its agent, duration, failure class and the decision that followed. Attempts
the user stopped are counted but left out of the success rate. The fallback
order puts agents with an open circuit breaker last, then ranks by the lower
bound of the success rate (so 9 of 10 ranks above 1 of 1), then by median
duration. Tasks that started 3 or more attempts after their first in the
last hour (whatever --window says) are listed as restarting often, most
first (at most 10): each with its agent, its restarts, and how long its
last recovery took (from a failed attempt's end to the end of the next
attempt that exited 0), or how long it has been failing.

Example:
  tasksup agents
  tasksup agents --window 7d --json)");
  cmd->callback([opts, &status] { status = agents(*opts); });
}

command_registrar registrar{65, setup_agents};

} // namespace

} // namespace tasksup::app
