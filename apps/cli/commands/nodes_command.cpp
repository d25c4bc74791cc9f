// `tasksup nodes`: the worker nodes that joined a coordinator, their
// capacity, runtimes, labels and the attempts running on each.

#include "commands.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct nodes_options {
  std::string node;
  bool json = false;
};

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

boost::json::object to_json(const node_info& n) {
  boost::json::object o;
  o["name"] = n.offer.name;
  o["max_concurrent"] = n.offer.max_concurrent;
  o["running"] = n.running;
  boost::json::array runtimes;
  for (auto& r : n.offer.runtimes)
    runtimes.emplace_back(r);
  o["runtimes"] = std::move(runtimes);
  boost::json::object labels;
  for (auto& [k, v] : n.offer.labels)
    labels[k] = v;
  o["labels"] = std::move(labels);
  o["joined_s_ago"] = n.joined_s;
  return o;
}

void print_table(const std::vector<node_info>& all) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NODE", "RUNNING", "SLOTS", "RUNTIMES", "LABELS"});
  for (auto& n : all)
    rows.push_back({cell(n.offer.name), std::to_string(n.running),
                    std::to_string(n.offer.max_concurrent),
                    cell(joined(n.offer.runtimes)),
                    cell(to_string(n.offer.labels))});
  print_columns(std::cout, rows);
}

int nodes(const nodes_options& opts) {
  return with_node("nodes", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    s.self->request(s.node, node_request_timeout, nodes_atom::value)
      .receive(
        [&](std::vector<node_info>& all) {
          if (opts.json) {
            boost::json::array out;
            for (auto& n : all)
              out.emplace_back(to_json(n));
            std::cout << boost::json::serialize(out) << '\n';
            return;
          }
          if (all.empty()) {
            std::cout << "no worker node has joined: this node runs the "
                         "attempts itself\n";
            return;
          }
          print_table(all);
        },
        [&](caf::error& err) {
          rc = report_request_error(s, err, exit_status::unavailable);
        });
    return rc;
  });
}

void setup_nodes(CLI::App& app, int& status) {
  auto opts = std::make_shared<nodes_options>();
  auto* cmd = app.add_subcommand(
    "nodes", "Show the worker nodes that joined a coordinator: attempts "
             "running and slots, runtimes and labels.");
  cmd->add_flag("--json", opts->json,
                "Print a JSON array: name, max_concurrent, running, "
                "runtimes, labels, joined_s_ago");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Worker nodes join with `tasksup serve --join HOST:PORT`; attempts go to the
node that has the task's runtime and every label of its placement.labels,
with the most free slots. A node that is lost (killed, frozen past the
coordinator's --peer-timeout) leaves the list; its attempts run again
elsewhere.

Example:
  tasksup nodes
  tasksup nodes --json)");
  cmd->callback([opts, &status] { status = nodes(*opts); });
}

command_registrar registrar{62, setup_nodes};

} // namespace

} // namespace tasksup::app
