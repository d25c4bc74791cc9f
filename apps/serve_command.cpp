// `tasksup serve`: runs a node that accepts tasks from the control commands.

#include "actor_setup.hpp"
#include "commands.hpp"
#include "config_location.hpp"
#include "connection_guard.hpp"
#include "current_node.hpp"
#include "dashboard.hpp"
#include "dashboard_auth.hpp"
#include "http_server.hpp"
#include "local_api.hpp"
#include "local_control.hpp"
#include "node_address.hpp"
#include "node_setup.hpp"
#include "notifier.hpp"
#include "peer_directory.hpp"
#include "progress_view.hpp"
#include "service_notify.hpp"
#include "signal_watch.hpp"
#include "tls_server_context.hpp"
#include "worker_node.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"
#include "tasksup/actors/stats_actor.hpp"

#include "tasksup/journal/journal_store.hpp"
#include "tasksup/runtime/docker_runtime.hpp"
#include "tasksup/runtime/private_files.hpp"
#include "tasksup/supervisor/shlex.hpp"

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

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
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
  std::string state_dir;
  bool no_journal = false;
  std::string journal_sync = "full";
  double retain_days = 7;
  std::int64_t retain_tasks = 10000;
  /// HOST:PORT for /metrics and the dashboard; empty: off.
  std::string http;
  /// The HTTP server's token file; empty: <state dir>/http-token.
  std::string http_token_file;
  /// Task-end hooks (see notifier.hpp).
  std::string notify_command;
  std::string notify_url;
  std::vector<std::string> notify_on;
  /// A worker node: the coordinator to join (see worker_node.hpp).
  worker_node_options worker;
  /// A coordinator drops a worker node (and retries its attempts
  /// elsewhere) after this long without a heartbeat from it.
  double peer_timeout_s = 10;
  /// Bounds on the awaits and event subscriptions clients leave pending
  /// (see door_options); defaults there.
  std::size_t max_pending_per_client = door_options{}.max_pending_per_client;
  std::size_t max_pending = door_options{}.max_pending;
  double await_timeout_s =
    std::chrono::duration<double>(door_options{}.await_timeout).count();
  /// Certificate directory (see tls_server_context.hpp); --insecure: none.
  std::string certs;
  bool insecure = false;
};

/// How long a shutdown waits for tasks to end after stopping them
/// gracefully before killing them.
constexpr std::chrono::seconds shutdown_grace{30};

/// Logs one event of the node through the progress view (one line per
/// rendered line, task prefixed; agent output stays in the attempt logs),
/// from its typed keys: no JSON rendered and parsed back.
void log_event(progress_view& view, const event& ev) {
  for (auto& line : view.render(ev)) {
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

/// The node's local control socket (local_control.hpp) for the front door
/// on `port`, in `state_dir`; null, with a warning, when it cannot be made
/// (local commands then use the TCP port).
std::unique_ptr<http_server> start_control_socket(caf::actor_system& sys,
                                                  const caf::actor& door,
                                                  const caf::actor& stats,
                                                  const std::string& state_dir,
                                                  std::uint16_t port) {
  std::error_code ec;
  if (!std::filesystem::exists(state_dir, ec) &&
      std::filesystem::create_directories(state_dir, ec))
    std::filesystem::permissions(state_dir, std::filesystem::perms::owner_all,
                                 ec);
  auto path = control_socket_path(state_dir, port);
  local_api_context ctx{&sys, door, stats};
  std::string err;
  auto server = http_server::start(
    local_api_server_options(path),
    [ctx](const http_request& req, http_reply reply) {
      handle_local_request(ctx, req, std::move(reply));
    },
    err);
  if (server)
    spdlog::info("control socket {} (this user's commands on this machine)",
                 path);
  else
    spdlog::warn("no control socket at {}: {}; local commands use the TCP "
                 "port",
                 path, err);
  return server;
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
  std::optional<node_address> http_addr;
  if (!opts.http.empty()) {
    auto h = parse_node_address(opts.http, true);
    if (!h)
      return bad("--http: " + h.error().to_string());
    if (!is_loopback_host(h->host) && !opts.allow_remote)
      return bad("refusing to serve HTTP on " + h->to_string() +
                 ": it is not a loopback address, and the dashboard can stop "
                 "tasks. Pass --allow-remote to serve there anyway.");
    http_addr = *h;
  }
  notifier_options notify_opts;
  if (!opts.notify_command.empty()) {
    auto argv = shlex_split(opts.notify_command);
    if (!argv)
      return bad("--notify-command: " + argv.error().to_string());
    if (argv->empty())
      return bad("--notify-command: no command given");
    notify_opts.command = std::move(*argv);
  }
  if (!opts.notify_url.empty()) {
    auto u = parse_http_url(opts.notify_url);
    if (!u)
      return bad(u.error().to_string());
    notify_opts.url = opts.notify_url;
  }
  if (!opts.notify_on.empty()) {
    notify_opts.outcomes.clear();
    for (auto& o : opts.notify_on) {
      if (o != "succeeded" && o != "failed" && o != "stopped")
        return bad("--notify-on: expected succeeded, failed or stopped; got '" +
                   o + "'");
      notify_opts.outcomes.insert(o);
    }
  }
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
  // The journal first: a node that cannot read its journal does not start
  // (an empty start would lose every task in it).
  std::unique_ptr<journal::journal_store> store;
  auto state_dir =
    absolute_dir(opts.state_dir.empty() ? default_state_dir() : opts.state_dir);
  // The journal, the attempts' output and the certificates' keys are kept
  // here: an existing directory other users can open is made private first.
  if (auto secured = secure_state_dir(state_dir); !secured) {
    std::cerr << "tasksup serve: " << secured.error().to_string() << '\n';
    return exit_status::unavailable;
  }
  if (!opts.no_journal) {
    journal::store_options jopts;
    jopts.dir = state_dir;
    jopts.sync = *journal::parse_sync_mode(opts.journal_sync);
    auto opened = journal::journal_store::open(jopts);
    if (!opened) {
      std::cerr << "tasksup serve: " << opened.error().to_string() << '\n';
      return exit_status::unavailable;
    }
    store = std::move(*opened);
    auto snapshot = load_journal(*store);
    if (!snapshot) {
      std::cerr << "tasksup serve: " << snapshot.error().to_string()
                << "; the node does not start rather than lose tasks\n";
      return exit_status::unavailable;
    }
    for (auto& w : snapshot->warnings)
      spdlog::warn("journal: {}", w);
    reg.restored = std::move(*snapshot);
  }
  auto tls = front_door_tls(opts.certs, state_dir, opts.insecure);
  if (!tls)
    return bad(tls.error().to_string());
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
  // With a journal the attempts live beside it, so a restarted node finds
  // the directories of the attempts it resumes.
  reg.attempt_root = !opts.work_dir.empty() ? absolute_dir(opts.work_dir)
                     : store                ? state_dir + "/attempts"
                                            : fresh_work_dir("node");
  auto attempt_root = reg.attempt_root;
  // A long-lived node creates and removes a directory per task here
  // (fresh_work_dir marks its parent the same way).
  if (store && opts.work_dir.empty()) {
    runtime::make_top_directory(attempt_root);
    // One an older node made may be 0755.
    ::chmod(attempt_root.c_str(), runtime::private_dir_mode);
  }
  auto max_concurrent = reg.config.node.max_concurrent;

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, true);
  // Heartbeats also tell a frozen worker node from a busy one.
  sys_cfg.set("middleman.heartbeat-interval",
              caf::timespan{opts.worker.heartbeat});
  sys_cfg.set("middleman.connection-timeout",
              caf::timespan{std::chrono::duration_cast<caf::timespan>(
                std::chrono::duration<double>(opts.peer_timeout_s))});
  reg.node_name = addr->to_string();
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  std::size_t resumed = 0;
  std::size_t kept = 0;
  for (auto& t : reg.restored.tasks)
    ++(t.finished ? kept : resumed);
  journal_actor journal;
  if (store) {
    journal_retention retention;
    retention.max_age_s = opts.retain_days * 86400;
    retention.max_count = opts.retain_tasks;
    journal = spawn_journal(sys, std::move(store), retention);
    reg.journal = journal;
    spdlog::info("journal in {} ({} unfinished task(s) resume, {} finished "
                 "kept)",
                 state_dir, resumed, kept);
  } else {
    spdlog::warn("no journal (--no-journal): tasks are lost if this node "
                 "stops");
  }
  auto registry = spawn_registry(sys, std::move(reg));
  // Clients reach the node through its door only: the registry's own
  // handlers (slots, breaker reports, events) stay internal.
  // The statistics start before the door opens: they see every event.
  auto stats = spawn_stats(sys, registry, journal);
  // Names the client certificate behind each remote request, for the
  // audit lines of control requests.
  auto peers = std::make_shared<peer_directory>();
  door_options door_opts;
  door_opts.max_pending_per_client = opts.max_pending_per_client;
  door_opts.max_pending = opts.max_pending;
  door_opts.await_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(opts.await_timeout_s));
  door_opts.log = [](const std::string& x) { spdlog::warn("{}", x); };
  // Audit lines reach the log as the warning events they also are (see
  // log_event), once.
  door_opts.peer_name = [peers](const caf::node_id& node) {
    return peers->subject(node);
  };
  auto door = spawn_node_door(sys, registry, stats, std::move(door_opts));
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
  guard_opts.tls = *tls;
  guard_opts.on_client = [peers](const std::string& handshake,
                                 const std::string& subject) {
    peers->record(handshake, subject);
  };
  std::string guard_error;
  auto front = connection_guard::start(guard_opts, adopt, guard_error);
  if (!front) {
    spdlog::error("cannot listen on {}: {}", addr->to_string(), guard_error);
    self->send_exit(door, caf::exit_reason::user_shutdown);
    self->send_exit(registry, caf::exit_reason::user_shutdown);
    if (journal)
      self->send_exit(journal, caf::exit_reason::user_shutdown);
    return exit_status::unavailable;
  }
  std::unique_ptr<http_server> web;
  if (http_addr) {
    dashboard_context ctx;
    ctx.sys = &sys;
    ctx.registry = registry;
    ctx.door = door;
    ctx.stats = stats;
    ctx.allow_remote = opts.allow_remote;
    ctx.token_path = opts.http_token_file.empty() ? state_dir + "/http-token"
                                                  : opts.http_token_file;
    http_server_options web_opts;
    web_opts.host = http_addr->host;
    web_opts.port = http_addr->port;
    // Set once the server runs; read by its own handler only.
    auto web_ref = std::make_shared<std::atomic<const http_server*>>(nullptr);
    ctx.server_stats = [web_ref] {
      auto* server = web_ref->load();
      return server ? server->stats() : http_server_stats{};
    };
    std::string web_error;
    if (auto token = load_or_create_http_token(ctx.token_path))
      ctx.token = std::move(*token);
    else
      web_error = token.error().to_string();
    if (web_error.empty())
      web = http_server::start(
        web_opts,
        [ctx](const http_request& req, http_reply reply) {
          handle_node_request(ctx, req, std::move(reply));
        },
        web_error);
    if (web)
      web_ref->store(web.get());
    if (!web) {
      spdlog::error("cannot serve HTTP on {}: {}", http_addr->to_string(),
                    web_error);
      front.reset();
      self->send_exit(stats, caf::exit_reason::user_shutdown);
      self->send_exit(door, caf::exit_reason::user_shutdown);
      self->send_exit(registry, caf::exit_reason::user_shutdown);
      return exit_status::unavailable;
    }
    // Like Jupyter: the URL with the token, once, in the node's own log.
    auto web_at = node_address{http_addr->host, web->port()}.to_string();
    spdlog::info("metrics on http://{}/metrics (Authorization: Bearer, "
                 "token in {}), dashboard on http://{}/?token={}",
                 web_at, ctx.token_path, web_at, ctx.token);
  }
  auto port = front->port();
  node_address bound{addr->host, port};
  spdlog::info("listening on {} (runtime {}, at most {} attempts at once, "
               "config {}, attempts in {})",
               bound.to_string(), default_runtime, max_concurrent,
               cfg->dir.empty() ? std::string{"built-in defaults"} : cfg->dir,
               attempt_root);
  auto control = start_control_socket(sys, door, stats, state_dir, port);
  int early_signals = 0;
  {
    std::lock_guard<std::mutex> guard{target_mutex};
    target = caf::actor_cast<caf::actor>(self);
    early_signals = signals.count();
  }
  // A SIGTERM/SIGINT that came while the node was starting (the journal
  // read, its tasks restored: seconds for many) found no actor to tell; it
  // still stops the node.
  if (early_signals > 0)
    self->send(self, signal_atom::value, early_signals);
  self
    ->request(registry, std::chrono::seconds{10}, subscribe_atom::value,
              caf::actor_cast<caf::actor>(self))
    .receive([](bool) {},
             [](caf::error& err) {
               spdlog::warn("events will not be logged: {}", error_text(err));
             });
  // This user's commands now find this node without --node or --state-dir
  // (current_node.hpp), as kubectl's current context.
  current_node me{client_address_for(addr->host, port), state_dir,
                  opts.certs.empty() ? std::string{}
                                     : absolute_dir(opts.certs)};
  if (auto recorded = write_current_node(me))
    spdlog::info("current node for this user's commands: {} (state "
                 "directory {}; recorded in {})",
                 me.node, me.state_dir, current_node_path());
  else
    spdlog::warn("{}; commands need --node {} --state-dir {}",
                 recorded.error().to_string(), me.node, me.state_dir);
  // The journal is restored and the registry has answered: ready, for a
  // systemd unit of Type=notify.
  notify_service_manager(
    "READY=1\nSTATUS=listening on " + bound.to_string() + ", " +
    std::to_string(resumed) +
    " unfinished task(s) resumed\nMAINPID=" + std::to_string(::getpid()));

  std::unique_ptr<notifier> notify;
  if (!notify_opts.command.empty() || !notify_opts.url.empty())
    notify = std::make_unique<notifier>(
      notify_opts, [](const notify_report& r, bool final) {
        if (r.delivered)
          spdlog::info("[{}] notified ({}, try {})", r.task_id, r.target,
                       r.tries);
        else if (final)
          spdlog::error("[{}] notification ({}) given up after {} tries: {}",
                        r.task_id, r.target, r.tries, r.error);
        else
          spdlog::warn("[{}] notification ({}) failed (try {}): {}; will "
                       "retry",
                       r.task_id, r.target, r.tries, r.error);
      });
  auto on_event = [&](const event& ev) {
    if (!notify || ev.kind != event_kind::task_done)
      return;
    if (auto* f = ev.fields()) {
      if (auto* done = std::get_if<event_data::task_done>(&f->data))
        notify->offer(ev.task_id,
                      std::string{to_string(done->result().outcome)},
                      ev.json());
      return;
    }
    boost::system::error_code ec;
    auto doc = boost::json::parse(ev.json(), ec);
    if (!ec && doc.is_object())
      if (auto* o = doc.get_object().if_contains("outcome");
          o && o->is_string())
        notify->offer(ev.task_id, std::string{o->get_string()}, ev.json());
  };

  progress_view::options view_opts;
  view_opts.show_output = false;
  view_opts.prefix_task = true;
  progress_view view{view_opts};
  int signals_seen = 0;
  std::optional<std::chrono::steady_clock::time_point> stopping_since;
  bool killed = false;
  for (;;) {
    self->receive(
      [&](event_atom, const event& ev) {
        log_event(view, ev);
        on_event(ev);
      },
      [&](signal_atom, int count) { signals_seen = count; }, [&](bool) {},
      [&](caf::error&) {}, caf::after(std::chrono::milliseconds{250}) >> [] {});
    if (signals_seen == 0)
      continue;
    if (!stopping_since) {
      stopping_since = std::chrono::steady_clock::now();
      spdlog::info("shutting down: no new tasks; stopping the running ones "
                   "(signal again to kill them)");
      notify_service_manager("STOPPING=1\nSTATUS=shutting down: stopping "
                             "the running tasks");
      front->close_listener();
      control.reset();
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
    [&](event_atom, const event& ev) {
      log_event(view, ev);
      on_event(ev);
    },
    [&](signal_atom, int) {}, [&](bool) {}, [&](caf::error&) {},
    caf::after(std::chrono::milliseconds{100}) >> [&] { draining = false; });
  web.reset();
  notify.reset();
  self->send_exit(stats, caf::exit_reason::user_shutdown);
  self->send_exit(door, caf::exit_reason::user_shutdown);
  self->send_exit(registry, caf::exit_reason::user_shutdown);
  if (journal)
    self->send_exit(journal, caf::exit_reason::user_shutdown);
  // Commands without --node then say that no node is listening here,
  // rather than name a node that is gone (another node's record stays).
  clear_current_node(me);
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
  add_runtime_option(*cmd, opts->runtime,
                     "Runtime for tasks that name none (default: node.json's "
                     "default_runtime)");
  add_work_dir_option(*cmd, opts->work_dir, "node");
  cmd->add_option("--state-dir", opts->state_dir,
                  "Directory of the node's journal (and, unless --work-dir, "
                  "its attempts, and its default certificates; made 0700 "
                  "if other users could use it). Default: "
                  "$TASKSUP_STATE_DIR, else $XDG_STATE_HOME/tasksup, "
                  "/var/lib/tasksup for root, else ~/.local/state/tasksup");
  cmd->add_flag("--no-journal", opts->no_journal,
                "Keep tasks in memory only: nothing survives the node");
  cmd
    ->add_option("--journal-sync", opts->journal_sync,
                 "full: what a client is told of (a submission, a control "
                 "reply, a delivery, a task's end) is on disk first "
                 "(survives power loss), an attempt's progress is in the "
                 "operating system (survives a crash of the node); normal: "
                 "everything in the operating system only")
    ->check(CLI::IsMember({"full", "normal"}))
    ->capture_default_str();
  cmd
    ->add_option("--retain-days", opts->retain_days,
                 "Finished tasks older than this leave the journal (0: no "
                 "age limit)")
    ->check(CLI::NonNegativeNumber)
    ->capture_default_str();
  cmd
    ->add_option("--retain-tasks", opts->retain_tasks,
                 "At most this many finished tasks stay in the journal (0: "
                 "no limit)")
    ->check(CLI::NonNegativeNumber)
    ->capture_default_str();
  cmd->add_flag("--allow-remote", opts->allow_remote,
                "Allow --listen (and --http) on an address other than "
                "loopback. Anyone who can reach it can run commands as this "
                "user");
  cmd->add_option("--http", opts->http,
                  "Serve Prometheus metrics at /metrics and the dashboard at "
                  "/ on HOST:PORT (off by default; port 0 picks a free one; "
                  "loopback only unless --allow-remote)");
  cmd->add_option("--http-token-file", opts->http_token_file,
                  "The secret every HTTP request must show (Bearer token or "
                  "the dashboard's login cookie); created with 256 random "
                  "bits, mode 0600, when missing (default: "
                  "<state dir>/http-token)");
  cmd->add_option("--notify-command", opts->notify_command,
                  "When a task ends, run this command (split like a shell "
                  "would, not run through one) with the task_done event as "
                  "JSON on stdin");
  cmd->add_option("--notify-url", opts->notify_url,
                  "When a task ends, POST the task_done event as JSON to "
                  "this http://HOST:PORT/PATH");
  cmd->add_option("--notify-on", opts->notify_on,
                  "Outcomes that notify: succeeded, failed, stopped (repeat; "
                  "default all)");
  cmd->add_option("--join", opts->worker.join,
                  "Run as a worker node of the coordinator at HOST:PORT: "
                  "offer this node's attempt slots, runtimes and labels, and "
                  "run the attempts it places here (no journal, no tasks of "
                  "its own)");
  cmd->add_option("--name", opts->worker.name,
                  "With --join: this node's name in the cluster (default: "
                  "the host name)");
  cmd->add_option("--label", opts->worker.labels,
                  "With --join: a label KEY=VALUE tasks can ask for with "
                  "placement.labels (repeat)");
  cmd
    ->add_option(
      "--heartbeat-ms",
      [opts](const std::vector<std::string>& v) {
        opts->worker.heartbeat = std::chrono::milliseconds{std::stoll(v.at(0))};
        return true;
      },
      "Milliseconds between heartbeats to peers (default 1000)")
    ->check(CLI::Range(50, 60000));
  cmd
    ->add_option("--peer-timeout", opts->peer_timeout_s,
                 "Seconds without a heartbeat after which a worker node is "
                 "lost: its attempts are retried on other nodes")
    ->check(CLI::Range(0.2, 3600.0))
    ->capture_default_str();
  cmd
    ->add_option("--max-pending-per-client", opts->max_pending_per_client,
                 "Awaits and event subscriptions (events --follow) one "
                 "client (one connection) may have pending at once; one more "
                 "is refused with an error naming this limit")
    ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}))
    ->capture_default_str();
  cmd
    ->add_option("--max-pending", opts->max_pending,
                 "Awaits and event subscriptions all clients together may "
                 "have pending at once")
    ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}))
    ->capture_default_str();
  cmd
    ->add_option("--await-timeout", opts->await_timeout_s,
                 "Seconds after which an await (a client waiting for a "
                 "task's result) ends with an await_timeout error; the "
                 "client awaits again to keep waiting")
    ->check(CLI::Range(0.1, 86400.0))
    ->capture_default_str();
  cmd
    ->add_option(
      "--lease",
      [opts](const std::vector<std::string>& v) {
        opts->worker.lease = std::chrono::milliseconds{
          static_cast<std::int64_t>(std::stod(v.at(0)) * 1000)};
        return true;
      },
      "With --join: seconds without a word from the coordinator "
      "after which this node kills its attempts (default 5; keep "
      "it below the coordinator's --peer-timeout)")
    ->check(CLI::Range(0.1, 3600.0));
  auto* certs =
    cmd->add_option("--certs", opts->certs,
                    "Directory with ca.crt, node.crt and node.key (`tasksup "
                    "certs init DIR`). Default: <state dir>/certs, created on "
                    "the first start");
  cmd
    ->add_flag("--insecure", opts->insecure,
               "Plain TCP without certificates: anyone who can reach the "
               "port can run commands as this user")
    ->excludes(certs);
  cmd->footer(std::string{config_dir_rule} + R"(

The node runs at most node.json's max_concurrent attempts at once; further
tasks queue in submission order. Every task is recorded in the journal
(SQLite, in the state directory) before `submit` returns its id, and every
step it takes before it is carried out: a node killed at any point and
started again on the same state directory resumes its tasks (a retry waits
only the time left; an attempt that was running is judged lost, as an
infrastructure failure) and keeps the history of finished ones. It logs to
stderr. Notifications (--notify-command, --notify-url) are delivered on a
thread of their own and retried with backoff (1 s, doubling, 5 tries)
without ever holding up the tasks; each failed try is logged. SIGINT or
SIGTERM stops
accepting tasks, stops the running ones gracefully and exits once they have
ended; a second signal kills them.

Every connection is mutual TLS (1.2 or later): a peer must show a
certificate signed by the node's CA, or it is refused during the handshake,
before anything reaches the node. The certificates are in --certs DIR, else
in <state dir>/certs, where the first start creates a CA, a node and a client
certificate readable by this user only; `tasksup` commands run by this user
find them there (see `tasksup status --help`). --insecure turns TLS off.

At start the node logs its state directory ("created state directory DIR"
when it made it: as root that is /var/lib/tasksup) and records itself as
this user's current node in $XDG_CONFIG_HOME/tasksup/current-node (else
~/.config/tasksup/current-node; mode 0600): its address, state directory
and --certs. This user's commands given no --node, --state-dir or
$TASKSUP_NODE/$TASKSUP_STATE_DIR then talk to it, whatever its state
directory; a clean stop removes the record if it still names this node
(`tasksup context` shows, sets and clears it).

Under systemd (a unit of Type=notify; one ships as tasksup.service), the
node sends READY=1 to $NOTIFY_SOCKET once it listens and has restored its
journal, and STOPPING=1 when a signal starts its shutdown.

What a client can leave pending at the node is bounded: an await (waiting
for a task's result) ends after --await-timeout with an await_timeout error
(await again to keep waiting); a client's awaits and event subscriptions
together stop at --max-pending-per-client, everyone's at --max-pending, and
one more is refused with a limit_reached error naming the limit and its
value. A client that goes away loses its subscriptions.

Every stop, kill, retry-now, fallback-now, forget, pause and resume is
logged as an audit line naming who asked (a remote client by its
certificate's subject, a local one by its uid), the action and the task, and
recorded as a warning event of the task, so `tasksup describe` and `events`
show it (a forgotten task's history goes with it: its audit line stays in
the log).

A cluster: worker nodes start with --join HOST:PORT (and --name, --label
KEY=VALUE) and offer their slots, runtimes and labels; the coordinator places
each attempt on the fitting worker with the most free slots (a task's
placement.labels must all match) and keeps tasks, journal and supervisors
itself. A worker joins with the node certificate in --certs DIR (copy the
coordinator's ca.crt, node.crt and node.key there; never ca.key). A worker
lost (killed, or silent for --peer-timeout) has its attempts retried on
another at once; a worker that hears nothing for --lease kills its attempts.
`tasksup nodes` lists the workers.

On this machine, the node also serves its own user (only: SO_PEERCRED)
on the Unix socket <state dir>/control-PORT.sock, which `tasksup status`,
`submit`, `stop`, `kill`, `retry-now` and `fallback-now` use when they name
no credentials: no TLS handshake, no actor system to load. The socket is
removed when the node stops.

The HTTP server (--http) answers only requests that show its token: the
first start writes 256 random bits to <state dir>/http-token (mode 0600;
--http-token-file PATH to keep it elsewhere) and later starts reuse it.
Scrapers send `Authorization: Bearer TOKEN` (Prometheus:
authorization.credentials_file pointing at the file); a browser opens the
URL the node logs at start, /?token=TOKEN, which sets an HttpOnly,
SameSite=Strict cookie and drops the token from the address bar. Anything
else gets 401. The buttons' POSTs must also come from the page's own
origin.

Example:
  tasksup serve --listen 127.0.0.1:7420 --config config \
    --http 127.0.0.1:7421 &
  tasksup submit config/examples/demo-flaky.json
  tasksup status
  tasksup serve --join 10.0.0.1:7420 --name gpu-1 --label gpu=true \
    --certs /etc/tasksup/certs   # on a worker machine)");
  cmd->callback([opts, &status] {
    if (!opts->worker.join.empty()) {
      opts->worker.certs = opts->certs;
      opts->worker.insecure = opts->insecure;
      opts->worker.config_dir = opts->config_dir;
      opts->worker.work_dir = opts->work_dir;
      opts->worker.state_dir = opts->state_dir;
      status = run_worker_node(opts->worker);
      return;
    }
    status = serve(*opts);
  });
}

command_registrar registrar{40, setup_serve};

} // namespace

} // namespace tasksup::app
