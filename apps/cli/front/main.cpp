// The tasksup program users run. `tasksup status`, `tasksup submit` and the
// control commands (stop, kill, retry-now, fallback-now, forget, pause,
// resume) against a node on this machine are answered here, over the node's
// local control socket (local_control.hpp), without loading the actor system
// and its TLS, which are most of a command's start-up (issue 17). Every other
// command, and these whenever the socket cannot serve them, run in tasksup-core
// beside this program, which this process becomes (exec: the same pid, the same
// arguments).

#include "control_actions.hpp"
#include "current_node.hpp"
#include "exit_status.hpp"
#include "json_text.hpp"
#include "local_control.hpp"
#include "node_address.hpp"
#include "state_dir.hpp"
#include "status_view.hpp"
#include "task_source.hpp"

#include "tasksup/supervisor/url_encode.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

namespace {

/// How long the command waits for one answer: the node's own requests end
/// within node_request_timeout and it answers a batch just after.
constexpr std::chrono::milliseconds answer_timeout =
  node_request_timeout + std::chrono::seconds{5};

/// The node options these commands take, as tasksup-core defines them.
struct node_flags {
  std::string node;
  std::string state_dir;
  std::string certs;
  bool insecure = false;
};

void add_node_flags(CLI::App* cmd, node_flags& f) {
  cmd->add_option("--node", f.node);
  cmd->add_option("--state-dir", f.state_dir);
  auto* certs = cmd->add_option("--certs", f.certs);
  cmd->add_flag("--insecure", f.insecure)->excludes(certs);
}

/// A connection to the control socket of the node `f` names.
struct local_node {
  local_connection conn;
  /// The socket's path (a later request connects again) and the node's
  /// address as messages write it.
  std::string path;
  std::string address;
};

/// Connects to the control socket of the node `f` names; nullopt when the
/// command must use the TCP port: a remote node, credentials the user named
/// (they choose TLS), or no usable socket there.
std::optional<local_node> connect_local(const node_flags& f) {
  if (!f.certs.empty() || f.insecure)
    return std::nullopt;
  if (auto* env = std::getenv("TASKSUP_CERTS"); env && *env != '\0')
    return std::nullopt;
  auto where = resolve_node_target(f.node, f.state_dir);
  auto addr = parse_node_address(where.node);
  if (!addr || !is_loopback_host(addr->host))
    return std::nullopt;
  auto path = control_socket_path(where.state_dir, addr->port);
  local_failure failure;
  auto conn = local_connection::open(path, failure);
  if (!conn)
    return std::nullopt;
  return local_node{std::move(*conn), std::move(path), addr->to_string()};
}

/// Adds the node options to `cmd`, parses the command line and connects to
/// the node's control socket; nullopt when the command line does not parse
/// (tasksup-core then says why, or prints the help asked for) or the
/// command must use the TCP port.
std::optional<local_node> parse_and_connect(CLI::App& app, CLI::App* cmd,
                                            int argc, char** argv) {
  node_flags f;
  add_node_flags(cmd, f);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error&) {
    return std::nullopt;
  }
  return connect_local(f);
}

/// An error answer's fields: {"error":..,"refused":B,"timeout":B}.
struct node_error {
  std::string text;
  bool refused = false;
  bool timeout = false;
};

node_error error_of(const local_answer& a) {
  node_error out;
  boost::system::error_code ec;
  auto doc = boost::json::parse(a.body, ec);
  auto* o = ec ? nullptr : doc.if_object();
  auto* text = o ? o->if_contains("error") : nullptr;
  if (!text || !text->is_string()) {
    out.text = "HTTP " + std::to_string(a.status) + ": " + a.body;
    while (!out.text.empty() && out.text.back() == '\n')
      out.text.pop_back();
    return out;
  }
  out.text = text->get_string();
  if (auto* r = o->if_contains("refused"); r && r->is_bool())
    out.refused = r->get_bool();
  if (auto* t = o->if_contains("timeout"); t && t->is_bool())
    out.timeout = t->get_bool();
  return out;
}

/// Sends one request on `node`'s connection; the answer when the node
/// answered 200, else nullopt with the failure reported as `command`'s and
/// its exit status in `rc`.
std::optional<local_answer> ask(local_node& node, const std::string& command,
                                const std::string& method,
                                const std::string& target, int& rc) {
  local_failure failure;
  auto answer = node.conn.exchange(method, target, {}, answer_timeout, failure);
  if (!answer) {
    rc = report_node_failure(command, node.address, false, failure.timeout,
                             failure.text, exit_status::unavailable);
    return std::nullopt;
  }
  if (answer->status != 200) {
    auto err = error_of(*answer);
    rc = report_node_failure(command, node.address, err.refused, err.timeout,
                             err.text, exit_status::unavailable);
    return std::nullopt;
  }
  return answer;
}

std::optional<int> local_status(int argc, char** argv) {
  CLI::App app;
  auto* cmd = app.add_subcommand("status");
  std::string task_id;
  bool json = false;
  bool watch = false;
  std::vector<std::string> state_values;
  std::vector<std::string> outcome_values;
  cmd->add_option("task", task_id);
  cmd->add_flag("--json", json);
  cmd->add_option("--state", state_values);
  cmd->add_option("--outcome", outcome_values);
  status_page_options page;
  cmd->add_option("--limit", page.limit);
  cmd->add_option("--after", page.after);
  std::string agent;
  cmd->add_option("--agent", agent);
  // --watch follows the node's events: tasksup-core does that.
  cmd->add_flag("--watch,-w", watch);
  auto node = parse_and_connect(app, cmd, argc, argv);
  status_filter filter;
  filter.agent = agent;
  // Bad values: tasksup-core says what is wrong with them.
  if (!node || watch || parse_state_filter(state_values, filter.states) ||
      parse_outcome_filter(outcome_values, filter.outcomes) ||
      check_page_options(page) || check_agent_filter(agent))
    return std::nullopt;
  int rc = exit_status::ok;
  bool connected = true;
  // Asks for `target` (on a new connection after the first: the node
  // closes each after its answer); the status it answers, or nullopt with
  // `rc` set.
  auto fetch = [&](const std::string& target) -> std::optional<status_answer> {
    if (!std::exchange(connected, false)) {
      local_failure failure;
      auto again = local_connection::open(node->path, failure);
      if (!again) {
        rc =
          report_node_failure("status", node->address, false, failure.timeout,
                              failure.text, exit_status::unavailable);
        return std::nullopt;
      }
      node->conn = std::move(*again);
    }
    auto answer = ask(*node, "status", "GET", target, rc);
    if (!answer)
      return std::nullopt;
    auto status = parse_status_answer(answer->body);
    if (!status)
      rc = report_node_failure("status", node->address, false, false,
                               "an answer that is not a status",
                               exit_status::unavailable);
    return status;
  };
  if (!task_id.empty()) {
    auto one = fetch("/v1/status/" + url_encode(task_id));
    if (!one)
      return rc;
    print_status(*one, true, json, filter);
    return exit_status::ok;
  }
  // Without --limit, every task, a chunk at a time (as tasksup-core asks):
  // with --json each chunk is printed as it comes.
  bool all = page.limit == 0;
  auto chunk = page;
  if (all)
    chunk.limit = status_chunk;
  status_answer whole;
  for (bool more = true; more;) {
    auto status = fetch("/v1/status?" + status_query_string(chunk, filter));
    if (!status)
      return rc;
    more = all && status->paging && status->paging->more > 0 &&
           !status->rows.empty();
    if (more)
      chunk.after = json_text_at(status->rows.back().record, "task_id");
    if (all && status->paging)
      status->paging->more = 0; // the next chunk follows: no "more" line
    if (all && json) {
      print_status(*status, false, true, filter);
      continue;
    }
    whole.now = status->now;
    whole.paging = status->paging;
    whole.schedules = std::move(status->schedules);
    whole.rows.insert(whole.rows.end(),
                      std::make_move_iterator(status->rows.begin()),
                      std::make_move_iterator(status->rows.end()));
  }
  if (!(all && json))
    print_status(whole, false, json, filter, next_page_command(page, filter));
  return exit_status::ok;
}

/// What one batch of `submit` sent, and how it went.
struct submit_run {
  std::string address;
  bool replace = false;
  std::size_t rejected = 0;
  bool node_failed = false;

  /// Reports that the node failed `batch[from, to)`.
  void not_submitted(const std::vector<task_text>& batch, std::size_t from,
                     std::size_t to, bool timeout, const std::string& why) {
    report_node_failure("submit", address, false, timeout, why,
                        exit_status::unavailable);
    for (auto i = from; i < to; ++i)
      std::cerr << "tasksup submit: " << batch[i].where
                << ": not known to be submitted\n";
    node_failed = true;
  }

  /// Sends `batch` on `conn` and prints what became of each task, in order.
  void send(local_connection& conn, const std::vector<task_text>& batch) {
    std::string body = replace ? R"({"replace":true,"tasks":[)"
                               : R"({"replace":false,"tasks":[)";
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (i > 0)
        body += ',';
      body += boost::json::serialize(boost::json::string{batch[i].text});
    }
    body += "]}";
    local_failure failure;
    auto answer =
      conn.exchange("POST", "/v1/submit", body, answer_timeout, failure);
    if (!answer)
      return not_submitted(batch, 0, batch.size(), failure.timeout,
                           failure.text);
    boost::system::error_code ec;
    auto doc = answer->status == 200 ? boost::json::parse(answer->body, ec)
                                     : boost::json::value{};
    auto* results = doc.if_array();
    if (!results || results->size() != batch.size()) {
      auto err = error_of(*answer);
      return not_submitted(batch, 0, batch.size(), err.timeout, err.text);
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto* r = (*results)[i].if_object();
      auto text_of = [&](const char* key) -> const boost::json::string* {
        auto* v = r ? r->if_contains(key) : nullptr;
        return v ? v->if_string() : nullptr;
      };
      if (auto* id = text_of("id")) {
        std::cout << std::string_view{*id} << '\n';
      } else if (auto* why = text_of("rejected")) {
        std::cerr << "tasksup submit: " << batch[i].where
                  << ": rejected by the node: " << std::string_view{*why}
                  << '\n';
        ++rejected;
      } else {
        auto* failed = text_of("failed");
        auto* timeout = r ? r->if_contains("timeout") : nullptr;
        not_submitted(batch, i, i + 1,
                      timeout && timeout->is_bool() && timeout->get_bool(),
                      failed ? std::string{*failed} : "no answer");
      }
    }
  }
};

std::optional<int> local_submit(int argc, char** argv) {
  CLI::App app;
  auto* cmd = app.add_subcommand("submit");
  std::vector<std::string> files;
  submit_run run;
  cmd->add_option("tasks", files)->required();
  cmd->add_flag("--replace", run.replace);
  // Connected before anything is read: stdin cannot be read twice.
  auto node = parse_and_connect(app, cmd, argc, argv);
  if (!node)
    return std::nullopt;
  run.address = node->address;
  std::optional<local_connection> conn = std::move(node->conn);
  task_source source{files};
  auto next = source.next();
  while (next && !run.node_failed) {
    std::vector<task_text> batch;
    std::size_t bytes = 0;
    while (next && batch.size() < local_submit_batch &&
           (batch.empty() ||
            bytes + next->text.size() <= local_submit_batch_bytes)) {
      bytes += next->text.size();
      batch.push_back(std::move(*next));
      next = source.next();
    }
    local_failure failure;
    if (!conn)
      conn = local_connection::open(node->path, failure);
    if (!conn) {
      run.not_submitted(batch, 0, batch.size(), false, failure.text);
      break;
    }
    run.send(*conn, batch);
    conn.reset();
  }
  std::cout.flush();
  if (run.node_failed)
    return exit_status::unavailable;
  if (run.rejected + source.failed > 0)
    return exit_status::bad_input;
  return exit_status::ok;
}

std::optional<int> local_control(const control_action& action, int argc,
                                 char** argv) {
  CLI::App app;
  auto* cmd = app.add_subcommand(action.name);
  std::string task_id;
  cmd->add_option("task", task_id)->required();
  auto node = parse_and_connect(app, cmd, argc, argv);
  if (!node)
    return std::nullopt;
  int rc = exit_status::ok;
  auto answer = ask(*node, action.name, "POST",
                    "/v1/tasks/" + url_encode(task_id) + "/" + action.name, rc);
  if (!answer)
    return rc;
  boost::system::error_code ec;
  auto doc = boost::json::parse(answer->body, ec);
  auto* took =
    doc.is_object() ? doc.get_object().if_contains("took_effect") : nullptr;
  if (!took || !took->is_bool())
    return report_node_failure(action.name, node->address, false, false,
                               "an answer that is not one",
                               exit_status::unavailable);
  if (took->get_bool()) {
    std::cout << action.done_text(task_id) << '\n';
    return exit_status::ok;
  }
  std::cout << action.noop_text(task_id) << '\n';
  return 1;
}

/// Becomes tasksup-core with the same arguments; returns only on failure.
int run_core(char** argv) {
  std::string self(4096, '\0');
  auto n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n <= 0) {
    std::cerr << "tasksup: cannot find this program's path: "
              << std::strerror(errno) << '\n';
    return 1;
  }
  self.resize(static_cast<std::size_t>(n));
  auto core = self.substr(0, self.rfind('/') + 1) + "tasksup-core";
  ::execv(core.c_str(), argv);
  std::cerr << "tasksup: cannot run " << core << ": " << std::strerror(errno)
            << '\n';
  return 1;
}

} // namespace

} // namespace tasksup::app

int main(int argc, char** argv) {
  using namespace tasksup::app;
  if (argc >= 2) {
    std::string_view cmd = argv[1];
    if (argc == 2 && cmd == "--version") {
      std::cout << "tasksup " TASKSUP_VERSION "\n";
      return exit_status::ok;
    }
    std::optional<int> rc;
    if (cmd == "status")
      rc = local_status(argc, argv);
    else if (cmd == "submit")
      rc = local_submit(argc, argv);
    else if (auto* action = find_control_action(cmd))
      rc = local_control(*action, argc, argv);
    if (rc)
      return *rc;
  }
  return run_core(argv);
}
