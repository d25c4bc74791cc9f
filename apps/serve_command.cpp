// `tasksup serve`: runs a node that accepts tasks from the control commands.

#include "actor_setup.hpp"
#include "commands.hpp"
#include "config_location.hpp"
#include "connection_guard.hpp"
#include "node_address.hpp"
#include "node_setup.hpp"
#include "progress_view.hpp"
#include "signal_watch.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include "tasksup/runtime/docker_runtime.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/json/parse.hpp>

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct serve_options {
  std::string listen;
  std::string config_dir;
  std::string runtime;
  std::string work_dir;
  bool allow_remote = false;
};

/// How long a shutdown waits for tasks to end after stopping them
/// gracefully before killing them.
constexpr std::chrono::seconds shutdown_grace{30};

/// Logs one event of the node through the progress view (one line per
/// rendered line, task prefixed; agent output stays in the attempt logs).
void log_event(progress_view& view, const event& ev) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(ev.json, ec);
  if (ec || !doc.is_object())
    return;
  for (auto& line : view.render(doc.get_object())) {
    if (ev.kind == event_kind::warning)
      spdlog::warn("{}", line);
    else
      spdlog::info("{}", line);
  }
}

/// Ids of the tasks not yet done, or nullopt when the registry did not
/// answer.
std::optional<std::vector<std::string>> unfinished(caf::scoped_actor& self,
                                                   const caf::actor& registry) {
  std::optional<std::vector<std::string>> out;
  self->request(registry, std::chrono::seconds{10}, status_atom::value)
    .receive(
      [&](std::vector<task_status>& all) {
        out.emplace();
        for (auto& s : all)
          if (s.state != task_state::done)
            out->push_back(s.task_id);
      },
      [&](caf::error& err) {
        spdlog::error("the registry did not report its tasks: {}",
                      error_text(err));
      });
  return out;
}

int serve(const serve_options& opts) {
  auto bad = [](const std::string& text) {
    std::cerr << "tasksup serve: " << text << '\n';
    return exit_status::bad_input;
  };
  auto addr = parse_node_address(opts.listen, true);
  if (!addr)
    return bad(addr.error().to_string());
  if (!is_loopback_host(addr->host) && !opts.allow_remote)
    return bad("refusing to listen on " + addr->to_string() +
               ": it is not a loopback address, and anyone who can reach it "
               "can run commands on this machine as this user. Pass "
               "--allow-remote to listen there anyway (and protect the port "
               "with a firewall).");
  auto cfg = load_node_config(opts.config_dir);
  if (!cfg)
    return bad(cfg.error().to_string());
  auto default_runtime =
    opts.runtime.empty() ? cfg->config.node.default_runtime : opts.runtime;

  std::mutex target_mutex;
  caf::actor target;
  signal_watch signals{{SIGINT, SIGTERM}, [&](int, int count) {
                         std::lock_guard<std::mutex> guard{target_mutex};
                         if (target)
                           caf::anon_send(target, signal_atom::value, count);
                       }};
  setup_logging(true);

  // The process runtime always; docker when its engine settings are usable
  // (an engine that is down only fails the attempts that need it).
  registry_options reg;
  // Attempts outlive a crashed node (their shims and containers keep
  // running) so that a restarted node can adopt them.
  runtime_owner owner{"serve", runtime::orphan_policy::keep};
  auto process = make_named_runtime("process", cfg->config.node, owner);
  if (!process)
    return bad(process.error().to_string());
  reg.runtimes["process"] = *process;
  if (auto docker = make_named_runtime("docker", cfg->config.node, owner))
    reg.runtimes["docker"] = *docker;
  else if (default_runtime == "docker")
    return bad(docker.error().to_string());
  else
    spdlog::warn("the docker runtime is not available: {}",
                 docker.error().to_string());
  reg.runtimes["*"] = reg.runtimes.at(default_runtime);
  reg.config = cfg->config;
  reg.seed = fresh_seed();
  reg.attempt_root =
    opts.work_dir.empty() ? fresh_work_dir("node") : opts.work_dir;
  auto attempt_root = reg.attempt_root;
  auto max_concurrent = reg.config.node.max_concurrent;

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, true);
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  auto registry = spawn_registry(sys, std::move(reg));
  // Clients reach the node through its door only: the registry's own
  // handlers (slots, breaker reports, events) stay internal.
  auto door = spawn_node_door(sys, registry);
  // The door is not published on a CAF port: the connection guard owns the
  // listening socket, checks each frame's announced size, times out stalled
  // frames and caps connections, and hands CAF's BASP broker one end of a
  // socket pair per connection, as if its own acceptor had taken it.
  auto basp =
    sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto door_ptr = caf::actor_cast<caf::strong_actor_ptr>(door);
  auto adopt = [&sys, basp, door_ptr](int fd) {
    auto scribe = sys.middleman().backend().new_scribe(fd);
    if (!scribe)
      return false;
    caf::anon_send(basp, caf::publish_atom::value, std::move(scribe),
                   std::uint16_t{0}, door_ptr, std::set<std::string>{});
    return true;
  };
  connection_guard_options guard_opts;
  guard_opts.host = addr->host;
  guard_opts.port = addr->port;
  std::string guard_error;
  auto front = connection_guard::start(guard_opts, adopt, guard_error);
  if (!front) {
    spdlog::error("cannot listen on {}: {}", addr->to_string(), guard_error);
    self->send_exit(door, caf::exit_reason::user_shutdown);
    self->send_exit(registry, caf::exit_reason::user_shutdown);
    return exit_status::unavailable;
  }
  auto port = front->port();
  node_address bound{addr->host, port};
  spdlog::info("listening on {} (runtime {}, at most {} attempts at once, "
               "config {}, attempts in {})",
               bound.to_string(), default_runtime, max_concurrent,
               cfg->dir.empty() ? std::string{"built-in defaults"} : cfg->dir,
               attempt_root);
  {
    std::lock_guard<std::mutex> guard{target_mutex};
    target = caf::actor_cast<caf::actor>(self);
  }
  self
    ->request(registry, std::chrono::seconds{10}, subscribe_atom::value,
              caf::actor_cast<caf::actor>(self))
    .receive([](bool) {},
             [](caf::error& err) {
               spdlog::warn("events will not be logged: {}", error_text(err));
             });

  progress_view::options view_opts;
  view_opts.show_output = false;
  view_opts.prefix_task = true;
  progress_view view{view_opts};
  int signals_seen = 0;
  std::optional<std::chrono::steady_clock::time_point> stopping_since;
  bool killed = false;
  for (;;) {
    self->receive([&](event_atom, const event& ev) { log_event(view, ev); },
                  [&](signal_atom, int count) { signals_seen = count; },
                  [&](bool) {}, [&](caf::error&) {},
                  caf::after(std::chrono::milliseconds{250}) >> [] {});
    if (signals_seen == 0)
      continue;
    if (!stopping_since) {
      stopping_since = std::chrono::steady_clock::now();
      spdlog::info("shutting down: no new tasks; stopping the running ones "
                   "(signal again to kill them)");
      front->close_listener();
      if (auto ids = unfinished(self, registry))
        for (auto& id : *ids)
          self->send(registry, stop_atom::value, id, stop_mode::cancel);
    }
    auto ids = unfinished(self, registry);
    if (!ids || ids->empty())
      break;
    auto waited = std::chrono::steady_clock::now() - *stopping_since;
    if (!killed && (signals_seen > 1 || waited > shutdown_grace)) {
      killed = true;
      spdlog::warn("killing {} task(s) that did not stop", ids->size());
      for (auto& id : *ids)
        self->send(registry, stop_atom::value, id, stop_mode::kill);
    }
    if (waited > shutdown_grace * 2) {
      spdlog::error("{} task(s) did not end; exiting anyway", ids->size());
      break;
    }
  }
  {
    std::lock_guard<std::mutex> guard{target_mutex};
    target = nullptr;
  }
  // Drain the events of the last stops into the log.
  bool draining = true;
  self->receive_while([&] { return draining; })(
    [&](event_atom, const event& ev) { log_event(view, ev); },
    [&](signal_atom, int) {}, [&](bool) {}, [&](caf::error&) {},
    caf::after(std::chrono::milliseconds{100}) >> [&] { draining = false; });
  self->send_exit(door, caf::exit_reason::user_shutdown);
  self->send_exit(registry, caf::exit_reason::user_shutdown);
  spdlog::info("stopped");
  return exit_status::ok;
}

void setup_serve(CLI::App& app, int& status) {
  auto opts = std::make_shared<serve_options>();
  opts->listen = "127.0.0.1:" + std::to_string(default_node_port);
  auto* cmd = app.add_subcommand(
    "serve", "Run a node: accept tasks from `tasksup submit` and run them "
             "under supervision until SIGINT/SIGTERM.");
  cmd
    ->add_option("--listen", opts->listen,
                 "Address and port to listen on, HOST:PORT (port 0 picks a "
                 "free one; the log says which)")
    ->capture_default_str();
  add_config_option(*cmd, opts->config_dir);
  cmd
    ->add_option("--runtime", opts->runtime,
                 "Runtime for tasks that name none (default: node.json's "
                 "default_runtime)")
    ->check(CLI::IsMember(
      std::vector<std::string>(runtime_names.begin(), runtime_names.end())));
  cmd->add_option("--work-dir", opts->work_dir,
                  "Directory for the attempts' workspaces, artifacts and "
                  "output logs (default: a fresh $TMPDIR/tasksup/node-...)");
  cmd->add_flag("--allow-remote", opts->allow_remote,
                "Allow --listen on an address other than loopback. Anyone "
                "who can reach it can run commands as this user");
  cmd->footer(std::string{config_dir_rule} + R"(

The node runs at most node.json's max_concurrent attempts at once; further
tasks queue in submission order. It logs to stderr. SIGINT or SIGTERM stops
accepting tasks, stops the running ones gracefully and exits once they have
ended; a second signal kills them.

Example:
  tasksup serve --listen 127.0.0.1:7420 --config config &
  tasksup submit config/examples/demo-flaky.json
  tasksup status)");
  cmd->callback([opts, &status] { status = serve(*opts); });
}

command_registrar registrar{40, setup_serve};

} // namespace

} // namespace tasksup::app
