#include "node.hpp"

#include "actor_setup.hpp"
#include "connection_guard.hpp"
#include "current_node.hpp"
#include "dashboard.hpp"
#include "dashboard_auth.hpp"
#include "exit_status.hpp"
#include "http_server.hpp"
#include "local_api.hpp"
#include "local_control.hpp"
#include "node_plan.hpp"
#include "peer_directory.hpp"
#include "progress_view.hpp"
#include "service_notify.hpp"
#include "signal_relay.hpp"
#include "webhook_ledger.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/stats_actor.hpp"
#include "tasksup/supervisor/role.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <memory>
#include <set>

namespace tasksup::app {

namespace {

/// How long a shutdown waits for tasks to end after stopping them
/// gracefully before killing them.
constexpr std::chrono::seconds shutdown_grace{30};

/// The running node: each child's handle, set by its start and cleared by
/// its stop.
struct node_parts {
  node_parts(const node_options& opts, node_plan& plan, caf::actor_system& sys,
             caf::scoped_actor& self)
    : opts(opts), plan(plan), sys(sys), self(self) {
    // nop
  }

  const node_options& opts;
  node_plan& plan;
  caf::actor_system& sys;
  caf::scoped_actor& self;
  journal_actor journal;
  registry_actor registry;
  stats_actor stats;
  node_door_actor door;
  /// Names the client certificate behind each remote request, for the
  /// audit lines of control requests.
  std::shared_ptr<peer_directory> peers = std::make_shared<peer_directory>();
  std::unique_ptr<connection_guard> front;
  std::unique_ptr<http_server> web;
  std::unique_ptr<http_server> control;
  std::unique_ptr<notifier> notify;
  std::unique_ptr<nats_bridge> nats;
  /// The webhooks' deliveries and reports, and who sends the reports.
  std::shared_ptr<webhook_ledger> ledger;
  std::unique_ptr<notifier> reporter;
};

/// One part of the node, as an OTP child spec: how it starts (false, after
/// logging why: the node does not start) and how it stops.
struct child_spec {
  const char* name;
  bool (*start)(node_parts&);
  void (*stop)(node_parts&);
};

template<class Handle>
void stop_actor(node_parts& n, Handle& h) {
  if (h)
    n.self->send_exit(h, caf::exit_reason::user_shutdown);
  h = Handle{};
}

/// A deposed leader stops at once: another coordinator may lead already,
/// so this one stops nothing (its tasks are the new leader's) and writes
/// nothing (its journal is fenced anyway).
[[noreturn]] void exit_deposed(const std::string& why) {
  spdlog::critical("{}; exiting at once (status {}), stopping nothing: the "
                   "leader carries on with the tasks",
                   why, exit_status::deposed);
  spdlog::default_logger()->flush();
  std::_Exit(exit_status::deposed);
}

/// The node's retention in words: "7 days, 10000 finished tasks".
std::string retention_words(double days, std::int64_t tasks) {
  auto age = days > 0 ? fmt::format("{:g} day(s)", days) : "no age limit";
  auto count =
    tasks > 0 ? fmt::format("{} finished tasks", tasks) : "no count limit";
  return age + ", " + count;
}

bool start_journal(node_parts& n) {
  if (!n.plan.store) {
    spdlog::warn("no journal (--no-journal): tasks are lost if this node "
                 "stops");
    return true;
  }
  journal_retention retention;
  retention.max_age_s = n.opts.retain_days * 86400;
  retention.max_count = n.opts.retain_tasks;
  journal_deposed_hook on_deposed;
  if (n.plan.leader)
    on_deposed = [](const std::string& why) { exit_deposed(why); };
  n.journal = spawn_journal(n.sys, std::move(n.plan.store), retention,
                            std::move(on_deposed));
  n.plan.registry.journal = n.journal;
  spdlog::info("journal in {} ({} unfinished task(s) resume, {} finished "
               "kept, {} expired now; retention: {})",
               n.opts.journal_url.empty()
                 ? n.plan.state_dir
                 : journal::redact_url(n.opts.journal_url),
               n.plan.resumed, n.plan.kept, n.plan.expired,
               retention_words(n.opts.retain_days, n.opts.retain_tasks));
  return true;
}

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// Hands the report of task `task_id`, which ended with `outcome` (its
/// `task_done` event is `done`), to the reporter when its trigger waits
/// for it: the event with the trigger's `context`, to the trigger's
/// command (`{{task.outcome}}` filled in) and/or URL. The event's JSON is
/// rendered only then.
void report_end(node_parts& n, const std::string& task_id,
                std::string_view outcome, const event& done) {
  if (!n.ledger || !n.reporter)
    return;
  auto r = n.ledger->take(task_id, outcome);
  if (!r)
    return;
  boost::system::error_code ec;
  auto doc = boost::json::parse(done.json(), ec);
  boost::json::object body;
  if (!ec && doc.is_object())
    body = std::move(doc.get_object());
  body["trigger"] = r->context;
  auto command = r->report.command;
  for (auto& arg : command)
    arg = render_template(arg, {{"task.outcome", outcome}});
  std::optional<http_url> url;
  if (!r->report.url.empty()) {
    if (auto u = parse_http_url(r->report.url)) {
      url = *u;
    } else {
      spdlog::error("[{}] report (url) not sent: {}: {}", task_id,
                    r->report.url, u.error().what);
      n.ledger->settled(task_id);
    }
  }
  n.reporter->offer_to(task_id, boost::json::serialize(body),
                       std::move(command), std::move(url));
}

/// What the webhooks remember, read before the registry takes the journal's
/// snapshot, and the reporter that sends the results of the tasks triggers
/// started, with the notifier's retries and bounds. The reports of tasks
/// that ended while the node was down go at once.
bool start_webhooks(node_parts& n) {
  auto& restored = n.plan.registry.restored;
  std::string saved;
  if (auto i = restored.node_state.find(std::string{webhook_state_key});
      i != restored.node_state.end())
    saved = i->second;
  n.ledger = std::make_shared<webhook_ledger>(
    n.journal, saved, [](const std::string& x) { spdlog::warn("{}", x); });
  auto opts = n.plan.notify;
  opts.command.clear();
  opts.url.clear();
  n.reporter = std::make_unique<notifier>(
    opts, [ledger = n.ledger](const notify_report& r, bool final) {
      if (r.delivered)
        spdlog::info("[{}] reported ({}, try {})", r.task_id, r.target,
                     r.tries);
      else if (final)
        spdlog::error("[{}] report ({}) given up after {} tries: {}", r.task_id,
                      r.target, r.tries, r.error);
      else
        spdlog::warn("[{}] report ({}) failed (try {}): {}; will retry",
                     r.task_id, r.target, r.tries, r.error);
      if (final)
        ledger->settled(r.task_id);
    });
  // One pass over the restored tasks, however many reports wait.
  auto waiting = n.ledger->waiting();
  std::set<std::string> unknown(waiting.begin(), waiting.end());
  for (auto& t : restored.tasks) {
    if (unknown.erase(t.task.spec.id) == 0 || !t.finished ||
        !t.finished->result)
      continue;
    auto& id = t.task.spec.id;
    auto& result = *t.finished->result;
    // When it ended is in its result; the event is told now.
    event_head head{
      id, t.finished->attempt, t.finished->trace_id, {}, wall_seconds()};
    report_end(n, id, to_string(result.outcome), task_done_event(head, result));
  }
  for (auto& id : unknown) {
    spdlog::warn("[{}] the journal has no such task: its report is dropped",
                 id);
    n.ledger->withdraw(id);
  }
  return true;
}

bool start_registry(node_parts& n) {
  n.registry = spawn_registry(n.sys, std::move(n.plan.registry));
  return true;
}

/// The statistics start before the door opens: they see every event.
bool start_stats(node_parts& n) {
  n.stats = spawn_stats(n.sys, n.registry, n.journal);
  return true;
}

/// Clients reach the node through its door only: the registry's own
/// handlers (slots, breaker reports, events) stay internal.
bool start_door(node_parts& n) {
  door_options door_opts;
  door_opts.max_pending_per_client = n.opts.max_pending_per_client;
  door_opts.max_pending = n.opts.max_pending;
  door_opts.await_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(n.opts.await_timeout_s));
  door_opts.log = [](const std::string& x) { spdlog::warn("{}", x); };
  // Audit lines reach the log as the warning events they also are (see
  // log_event), once.
  door_opts.peer = [peers = n.peers](const caf::node_id& node) {
    return peers->find(node);
  };
  // With TLS only a node certificate joins as a worker node.
  door_opts.joins_need_node_certificate = n.plan.tls != nullptr;
  n.door = spawn_node_door(n.sys, n.registry, n.stats, std::move(door_opts));
  return true;
}

/// The door is not published on a CAF port: the connection guard owns the
/// listening socket, checks each frame's announced size, times out stalled
/// frames and caps connections, and hands CAF's BASP broker one end of a
/// socket pair per connection, as if its own acceptor had taken it.
bool start_front_door(node_parts& n) {
  auto& sys = n.sys;
  auto basp =
    sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto door_ptr = caf::actor_cast<caf::strong_actor_ptr>(n.door);
  // Published with its interface: a client that expects another one (a
  // different version) learns so when it connects.
  auto door_ifs = sys.message_types(n.door);
  auto adopt = [&sys, basp, door_ptr, door_ifs](int fd) {
    auto scribe = sys.middleman().backend().new_scribe(fd);
    if (!scribe)
      return false;
    caf::anon_send(basp, caf::publish_atom::value, std::move(scribe),
                   std::uint16_t{0}, door_ptr, door_ifs);
    return true;
  };
  connection_guard_options guard_opts;
  guard_opts.host = n.plan.addr.host;
  guard_opts.port = n.plan.addr.port;
  guard_opts.tls = n.plan.tls;
  guard_opts.max_connections = n.opts.max_connections;
  guard_opts.on_client = [peers = n.peers](const std::string& handshake,
                                           const peer_certificate& cert) {
    peers->record(handshake, cert);
  };
  std::string guard_error;
  n.front = connection_guard::start(guard_opts, adopt, guard_error);
  if (!n.front) {
    spdlog::error("cannot listen on {}: {}", n.plan.addr.to_string(),
                  guard_error);
    return false;
  }
  return true;
}

/// /metrics and the dashboard, with --http.
bool start_http(node_parts& n) {
  if (!n.plan.http_addr)
    return true;
  auto& http_addr = *n.plan.http_addr;
  dashboard_context ctx;
  ctx.sys = &n.sys;
  ctx.registry = n.registry;
  ctx.door = n.door;
  ctx.stats = n.stats;
  ctx.allow_remote = n.opts.allow_remote;
  ctx.hooks.sys = &n.sys;
  ctx.hooks.door = n.door;
  ctx.hooks.triggers =
    std::make_shared<const trigger_map>(n.plan.config.config.triggers);
  ctx.hooks.log = [](const std::string& line) { spdlog::info("{}", line); };
  ctx.hooks.ledger = n.ledger;
  ctx.token_path = n.opts.http_token_file.empty()
                     ? n.plan.state_dir + "/http-token"
                     : n.opts.http_token_file;
  http_server_options web_opts;
  web_opts.host = http_addr.host;
  web_opts.port = http_addr.port;
  // A webhook delivery (an issue with a long body and its repository) can
  // pass the default 64 KiB; 1 MiB each, at most 64 connections.
  web_opts.limits.max_body = 1u << 20;
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
    n.web = http_server::start(
      web_opts,
      [ctx](const http_request& req, http_reply reply) {
        handle_node_request(ctx, req, std::move(reply));
      },
      web_error);
  if (!n.web) {
    spdlog::error("cannot serve HTTP on {}: {}", http_addr.to_string(),
                  web_error);
    return false;
  }
  web_ref->store(n.web.get());
  // Like Jupyter: the URL with the token, once, in the node's own log.
  auto web_at = node_address{http_addr.host, n.web->port()}.to_string();
  spdlog::info("metrics on http://{}/metrics (Authorization: Bearer, "
               "token in {}), dashboard on http://{}/?token={}",
               web_at, ctx.token_path, web_at, ctx.token);
  return true;
}

/// The node's local control socket (local_control.hpp) for the front door's
/// port, in the state directory. Without it (a warning) local commands use
/// the TCP port: the node still starts.
bool start_control_socket(node_parts& n) {
  auto port = n.front->port();
  node_address bound{n.plan.addr.host, port};
  spdlog::info("listening on {} (runtime {}, at most {} attempts at once, "
               "config {}, attempts in {})",
               bound.to_string(), n.plan.default_runtime,
               n.plan.config.config.node.max_concurrent,
               n.plan.config.dir.empty() ? std::string{"built-in defaults"}
                                         : n.plan.config.dir,
               n.plan.attempt_root);
  auto& state_dir = n.plan.state_dir;
  std::error_code ec;
  if (!std::filesystem::exists(state_dir, ec) &&
      std::filesystem::create_directories(state_dir, ec))
    std::filesystem::permissions(state_dir, std::filesystem::perms::owner_all,
                                 ec);
  auto path = control_socket_path(state_dir, port);
  local_api_context ctx{&n.sys, n.door, n.stats};
  std::string err;
  n.control = http_server::start(
    local_api_server_options(path),
    [ctx](const http_request& req, http_reply reply) {
      handle_local_request(ctx, req, std::move(reply));
    },
    err);
  if (n.control)
    spdlog::info("control socket {} (this user's commands on this machine)",
                 path);
  else
    spdlog::warn("no control socket at {}: {}; local commands use the TCP "
                 "port",
                 path, err);
  return true;
}

/// Task-end hooks, with --notify-command or --notify-url.
bool start_notifier(node_parts& n) {
  auto& opts = n.plan.notify;
  if (opts.command.empty() && opts.url.empty())
    return true;
  n.notify = std::make_unique<notifier>(opts, [](const notify_report& r,
                                                 bool final) {
    if (r.delivered)
      spdlog::info("[{}] notified ({}, try {})", r.task_id, r.target, r.tries);
    else if (final)
      spdlog::error("[{}] notification ({}) given up after {} tries: {}",
                    r.task_id, r.target, r.tries, r.error);
    else
      spdlog::warn("[{}] notification ({}) failed (try {}): {}; will "
                   "retry",
                   r.task_id, r.target, r.tries, r.error);
  });
  return true;
}

/// The bridge to NATS JetStream, with --nats: it takes submissions once the
/// node runs (`begin_intake`) and publishes every event.
bool start_nats(node_parts& n) {
  if (n.opts.nats.url.empty())
    return true;
  auto opts = n.opts.nats;
  opts.source =
    "tasksup://" + node_address{n.plan.addr.host, n.front->port()}.to_string();
  nats_log log;
  log.info = [](const std::string& x) { spdlog::info("{}", x); };
  log.warn = [](const std::string& x) { spdlog::warn("{}", x); };
  log.error = [](const std::string& x) { spdlog::error("{}", x); };
  std::string error;
  n.nats = nats_bridge::start(opts, n.sys, n.door, std::move(log), error);
  if (!n.nats) {
    spdlog::error("{}", error);
    return false;
  }
  return true;
}

/// The node's children, in start order; they stop in reverse.
constexpr child_spec node_children[] = {
  {"journal", start_journal, [](node_parts& n) { stop_actor(n, n.journal); }},
  // Before the registry, which consumes the journal's snapshot.
  {"webhooks", start_webhooks,
   [](node_parts& n) {
     n.reporter.reset();
     n.ledger.reset();
   }},
  {"registry", start_registry,
   [](node_parts& n) { stop_actor(n, n.registry); }},
  {"statistics", start_stats, [](node_parts& n) { stop_actor(n, n.stats); }},
  {"door", start_door, [](node_parts& n) { stop_actor(n, n.door); }},
  {"front door", start_front_door, [](node_parts& n) { n.front.reset(); }},
  {"http", start_http, [](node_parts& n) { n.web.reset(); }},
  // Before the control socket, whose line says the node listens: the
  // stream exists by then.
  {"nats", start_nats, [](node_parts& n) { n.nats.reset(); }},
  {"control socket", start_control_socket,
   [](node_parts& n) { n.control.reset(); }},
  {"notifier", start_notifier, [](node_parts& n) { n.notify.reset(); }},
};

constexpr std::size_t child_count = std::size(node_children);

/// Starts the children in order; returns how many started (all of them, or
/// those before the one that failed).
std::size_t start_children(node_parts& n) {
  std::size_t started = 0;
  while (started < child_count && node_children[started].start(n))
    ++started;
  return started;
}

/// Stops the first `started` children, last first.
void stop_children(node_parts& n, std::size_t started) {
  while (started > 0)
    node_children[--started].stop(n);
}

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

/// The outcome of a `task_done` event; nullopt for another event.
std::optional<std::string> outcome_of(const event& ev) {
  if (ev.kind != event_kind::task_done)
    return std::nullopt;
  if (auto* f = ev.fields()) {
    if (auto* done = std::get_if<event_data::task_done>(&f->data))
      return std::string{to_string(done->result().outcome)};
    return std::nullopt;
  }
  // An event read back from JSON (no typed keys).
  boost::system::error_code ec;
  auto doc = boost::json::parse(ev.json(), ec);
  if (!ec && doc.is_object())
    if (auto* o = doc.get_object().if_contains("outcome"); o && o->is_string())
      return std::string{o->get_string()};
  return std::nullopt;
}

/// What the node does with each of its events beside logging them: a
/// task's end goes to the notifier and, for a trigger's task, its report.
void pass_on(node_parts& n, const event& ev) {
  if (auto outcome = outcome_of(ev)) {
    if (n.notify)
      n.notify->offer(ev.task_id, *outcome, ev.json());
    report_end(n, ev.task_id, *outcome, ev);
  }
  if (n.nats)
    n.nats->observe(ev);
}

/// Ids of the tasks not yet done, or nullopt when the registry did not
/// answer.
std::optional<std::vector<std::string>>
unfinished(caf::scoped_actor& self, const registry_actor& registry) {
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

/// A standby's door: every request a client makes is answered with a
/// not_leader error that says who leads and where.
node_door_actor spawn_standby_door(caf::actor_system& sys,
                                   const leadership& leader) {
  auto* l = &leader;
  auto door = sys.spawn([l](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(
      [l](caf::scheduled_actor*,
          caf::message_view&) -> caf::result<caf::message> {
        return make_error(protocol_error::not_leader, l->standby_text());
      });
    // Nothing is handled but by the default handler.
    return {[](const std::string&) {}};
  });
  return caf::actor_cast<node_door_actor>(door);
}

/// Stands by until this coordinator takes the leader lease (nullopt: it
/// leads now) or a signal stops it (the exit status). Meanwhile the front
/// door answers clients who leads.
std::optional<int> stand_by(node_parts& n, signal_relay& signals) {
  auto& leader = *n.plan.leader;
  if (leader.try_take())
    return std::nullopt;
  leader.leader_changed();
  spdlog::info("{}", leader.standby_text());
  n.door = spawn_standby_door(n.sys, leader);
  if (!start_front_door(n)) {
    stop_actor(n, n.door);
    return exit_status::unavailable;
  }
  notify_service_manager("READY=1\nSTATUS=standing by: " +
                         leader.standby_text());
  int signals_seen = signals.aim(caf::actor_cast<signal_target_actor>(n.self));
  auto poll = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::duration<double>(leader.poll_s()));
  bool leads = false;
  while (signals_seen == 0 && !leads) {
    n.self->receive([&](signal_atom, int count) { signals_seen = count; },
                    caf::after(poll) >> [] {});
    if (signals_seen > 0)
      break;
    leads = leader.try_take();
    // Who leads changed (a new epoch, another holder): said once.
    if (!leads && leader.leader_changed())
      spdlog::info("{}", leader.standby_text());
  }
  signals.drop();
  n.front.reset();
  stop_actor(n, n.door);
  if (!leads) {
    spdlog::info("stopped (standing by)");
    return exit_status::ok;
  }
  return std::nullopt;
}

/// Runs the started node until a signal, then stops its tasks: gracefully,
/// killed after the grace period or a second signal, given up after twice
/// the grace period. Logs the node's events meanwhile.
void run_until_stopped(node_parts& n, progress_view& view) {
  auto& self = n.self;
  int signals_seen = 0;
  std::optional<std::chrono::steady_clock::time_point> stopping_since;
  bool killed = false;
  for (;;) {
    self->receive(
      [&](event_atom, const event& ev) {
        log_event(view, ev);
        pass_on(n, ev);
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
      n.front->close_listener();
      n.control.reset();
      if (n.nats)
        n.nats->end_intake();
      if (auto ids = unfinished(self, n.registry))
        for (auto& id : *ids)
          self->send(n.registry, stop_atom::value, id, stop_mode::cancel);
    }
    auto ids = unfinished(self, n.registry);
    if (!ids || ids->empty())
      break;
    auto waited = std::chrono::steady_clock::now() - *stopping_since;
    if (!killed && (signals_seen > 1 || waited > shutdown_grace)) {
      killed = true;
      spdlog::warn("killing {} task(s) that did not stop", ids->size());
      for (auto& id : *ids)
        self->send(n.registry, stop_atom::value, id, stop_mode::kill);
    }
    if (waited > shutdown_grace * 2) {
      spdlog::error("{} task(s) did not end; exiting anyway", ids->size());
      break;
    }
  }
}

/// Drains the events of the last stops into the log.
void drain_events(node_parts& n, progress_view& view) {
  bool draining = true;
  n.self->receive_while([&] { return draining; })(
    [&](event_atom, const event& ev) {
      log_event(view, ev);
      pass_on(n, ev);
    },
    [&](signal_atom, int) {}, [&](bool) {}, [&](caf::error&) {},
    caf::after(std::chrono::milliseconds{100}) >> [&] { draining = false; });
}

} // namespace

int run_node(const node_options& opts) {
  node_plan plan;
  if (auto rc = check_options(opts, plan))
    return *rc;
  // Before the actor system: its threads inherit the blocked signals.
  signal_relay signals;
  setup_logging(true);
  if (auto rc = open_state(opts, plan))
    return *rc;

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, true);
  // Heartbeats also tell a frozen worker node from a busy one.
  sys_cfg.set("middleman.heartbeat-interval",
              caf::timespan{opts.worker.heartbeat});
  sys_cfg.set("middleman.connection-timeout",
              caf::timespan{std::chrono::duration_cast<caf::timespan>(
                std::chrono::duration<double>(opts.peer_timeout_s))});
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  node_parts n{opts, plan, sys, self};
  if (plan.leader) {
    if (auto rc = stand_by(n, signals))
      return *rc;
    // Leading: the journal is read now, fenced with this leadership's
    // epoch, and the lease renewed from here on.
    spdlog::info("took the leader lease (epoch {}); reading the journal",
                 plan.leader->epoch());
    if (auto rc = restore_journal(plan))
      return *rc;
    spdlog::info("leading (epoch {}; lease {} s, renewed every {} s): {} "
                 "unfinished task(s) resume",
                 plan.leader->epoch(), opts.lease_s, opts.lease_s / 4,
                 plan.resumed);
    plan.leader->keep([](const std::string& why) { exit_deposed(why); });
  }
  auto started = start_children(n);
  if (started < child_count) {
    stop_children(n, started);
    return exit_status::unavailable;
  }
  // A SIGTERM/SIGINT that came while the node was starting (the journal
  // read, its tasks restored: seconds for many) found no actor to tell; it
  // still stops the node.
  if (auto early_signals =
        signals.aim(caf::actor_cast<signal_target_actor>(self));
      early_signals > 0)
    self->send(self, signal_atom::value, early_signals);
  self
    ->request(n.registry, std::chrono::seconds{10}, subscribe_atom::value,
              caf::actor_cast<subscriber_actor>(self))
    .receive([](bool) {},
             [](caf::error& err) {
               spdlog::warn("events will not be logged: {}", error_text(err));
             });
  // Subscribed: from here on the bridge sees every task start and end, so
  // it counts the node's backlog from the tasks unfinished now.
  if (n.nats) {
    if (auto ids = unfinished(self, n.registry))
      n.nats->begin_intake(std::move(*ids));
    else
      spdlog::error("nats: takes no submissions: the node's tasks are "
                    "unknown");
  }
  // This user's commands now find this node without --node or --state-dir
  // (current_node.hpp), as kubectl's current context.
  auto port = n.front->port();
  current_node me{client_address_for(plan.addr.host, port), plan.state_dir,
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
  node_address bound{plan.addr.host, port};
  notify_service_manager(
    "READY=1\nSTATUS=listening on " + bound.to_string() + ", " +
    std::to_string(plan.resumed) +
    " unfinished task(s) resumed\nMAINPID=" + std::to_string(::getpid()));

  progress_view::options view_opts;
  view_opts.show_output = false;
  view_opts.prefix_task = true;
  progress_view view{view_opts};
  run_until_stopped(n, view);
  signals.drop();
  drain_events(n, view);
  stop_children(n, started);
  // Commands without --node then say that no node is listening here,
  // rather than name a node that is gone (another node's record stays).
  clear_current_node(me);
  // Everything is journaled: a standby may lead at once.
  if (plan.leader)
    plan.leader->release();
  spdlog::info("stopped");
  return exit_status::ok;
}

} // namespace tasksup::app
