#include "node_plan.hpp"

#include "current_node.hpp"
#include "exit_status.hpp"
#include "nats_messages.hpp"
#include "state_dir.hpp"

#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/runtime/private_files.hpp"
#include "tasksup/supervisor/shlex.hpp"

#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <chrono>
#include <iostream>
#include <limits>

namespace tasksup::app {

namespace {

int bad(const std::string& text) {
  std::cerr << "tasksup serve: " << text << '\n';
  return exit_status::bad_input;
}

int unavailable(const std::string& text) {
  std::cerr << "tasksup serve: " << text << '\n';
  return exit_status::unavailable;
}

std::optional<int> check_notify(const node_options& opts, node_plan& plan) {
  auto& notify = plan.notify;
  if (!opts.notify_command.empty()) {
    auto argv = shlex_split(opts.notify_command);
    if (!argv)
      return bad("--notify-command: " + argv.error().to_string());
    if (argv->empty())
      return bad("--notify-command: no command given");
    notify.command = std::move(*argv);
  }
  if (!opts.notify_url.empty()) {
    auto u = parse_http_url(opts.notify_url);
    if (!u)
      return bad(u.error().to_string());
    notify.url = opts.notify_url;
  }
  if (!opts.notify_on.empty()) {
    notify.outcomes.clear();
    for (auto& o : opts.notify_on) {
      if (o != "succeeded" && o != "failed" && o != "stopped")
        return bad("--notify-on: expected succeeded, failed or stopped; got '" +
                   o + "'");
      notify.outcomes.insert(o);
    }
  }
  return std::nullopt;
}

/// The journal, opened; nothing with --no-journal. A shared journal comes
/// with its leader lease, held by this coordinator's address.
std::optional<int> open_journal(const node_options& opts, node_plan& plan) {
  if (opts.no_journal)
    return std::nullopt;
  journal::store_options jopts;
  jopts.dir = plan.state_dir;
  jopts.url = opts.journal_url;
  jopts.sync = *journal::parse_sync_mode(opts.journal_sync);
  auto opened = journal::journal_store::open(jopts);
  if (!opened)
    return unavailable(opened.error().to_string());
  plan.store = std::move(*opened);
  if (opts.journal_url.empty())
    return std::nullopt;
  auto me = client_address_for(plan.addr.host, plan.addr.port);
  auto lease =
    journal::leader_lease::open(opts.journal_url, me, me, opts.lease_s);
  if (!lease)
    return unavailable(lease.error().to_string());
  plan.leader = std::make_unique<leadership>(std::move(*lease));
  return std::nullopt;
}

/// The process runtime always; docker when its engine settings are usable
/// (an engine that is down only fails the attempts that need it).
std::optional<int> make_runtimes(node_plan& plan) {
  auto& reg = plan.registry;
  auto& node = plan.config.config.node;
  // Attempts outlive a crashed node (their shims and containers keep
  // running) so that a restarted node can adopt them.
  runtime_owner owner{"serve", runtime::orphan_policy::keep};
  auto process = make_named_runtime("process", node, owner);
  if (!process)
    return bad(process.error().to_string());
  reg.runtimes["process"] = *process;
  if (auto docker = make_named_runtime("docker", node, owner))
    reg.runtimes["docker"] = *docker;
  else if (plan.default_runtime == "docker")
    return bad(docker.error().to_string());
  else
    spdlog::warn("the docker runtime is not available: {}",
                 docker.error().to_string());
  reg.runtimes["*"] = reg.runtimes.at(plan.default_runtime);
  return std::nullopt;
}

/// A NATS name (a stream's, a consumer's): no dots, wildcards or spaces.
bool valid_nats_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_of(".*> \t\r\n/\\") == std::string::npos;
}

/// A subject: dot-separated tokens, none empty, no spaces; wildcards only
/// where `wildcards` (a last `>`, whole-token `*`).
bool valid_subject(const std::string& subject, bool wildcards) {
  if (subject.empty() || subject.size() > 255 ||
      subject.find_first_of(" \t\r\n") != std::string::npos)
    return false;
  std::size_t pos = 0;
  while (pos <= subject.size()) {
    auto end = std::min(subject.find('.', pos), subject.size());
    auto token = subject.substr(pos, end - pos);
    if (token.empty())
      return false;
    bool wild = token.find_first_of("*>") != std::string::npos;
    if (wild && (!wildcards || token.size() != 1 ||
                 (token == ">" && end != subject.size())))
      return false;
    pos = end + 1;
  }
  return true;
}

std::optional<int> check_nats(const node_options& opts) {
  auto& n = opts.nats;
  if (n.url.empty())
    return std::nullopt;
  if (n.url.compare(0, 7, "nats://") != 0 && n.url.compare(0, 6, "tls://") != 0)
    return bad("--nats: expected nats://HOST:PORT (or several, "
               "comma-separated); got '" +
               redact_nats_url(n.url) + "'");
  if (!valid_subject(n.subject, true))
    return bad("--nats-subject: '" + n.subject +
               "' is not a NATS subject (dot-separated tokens, no spaces; "
               "* and a last > as wildcards)");
  if (!n.events_prefix.empty() && !valid_subject(n.events_prefix, false))
    return bad("--nats-events: '" + n.events_prefix +
               "' is not a NATS subject without wildcards");
  if (!valid_nats_name(n.stream))
    return bad("--nats-stream: '" + n.stream +
               "' is not a stream name (no dots, wildcards or spaces)");
  if (!valid_nats_name(n.durable))
    return bad("--nats-durable: '" + n.durable +
               "' is not a consumer name (no dots, wildcards or spaces)");
  return std::nullopt;
}

} // namespace

std::optional<int> check_options(const node_options& opts, node_plan& plan) {
  auto addr = parse_node_address(opts.listen, true);
  if (!addr)
    return bad(addr.error().to_string());
  if (!is_loopback_host(addr->host) && !opts.allow_remote)
    return bad("refusing to listen on " + addr->to_string() +
               ": it is not a loopback address, and anyone who can reach it "
               "can run commands on this machine as this user. Pass "
               "--allow-remote to listen there anyway (and protect the port "
               "with a firewall).");
  plan.addr = *addr;
  if (!opts.journal_url.empty()) {
    if (opts.no_journal)
      return bad("--journal and --no-journal contradict each other");
    if (!journal::is_postgresql_url(opts.journal_url))
      return bad("--journal: expected a postgresql:// URL (the SQLite "
                 "journal is the default, in the state directory); got '" +
                 journal::redact_url(opts.journal_url) + "'");
    if (addr->port == 0)
      return bad("--journal " + journal::redact_url(opts.journal_url) +
                 ": give --listen a fixed port: standbys tell clients, and "
                 "workers find, the leader by its address");
  }
  if (!opts.http.empty()) {
    auto h = parse_node_address(opts.http, true);
    if (!h)
      return bad("--http: " + h.error().to_string());
    if (!is_loopback_host(h->host) && !opts.allow_remote)
      return bad("refusing to serve HTTP on " + h->to_string() +
                 ": it is not a loopback address, and the dashboard can stop "
                 "tasks. Pass --allow-remote to serve there anyway.");
    plan.http_addr = *h;
  }
  if (auto rc = check_notify(opts, plan))
    return rc;
  if (auto rc = check_nats(opts))
    return rc;
  auto cfg = load_node_config(opts.config_dir);
  if (!cfg)
    return bad(cfg.error().to_string());
  plan.config = std::move(*cfg);
  plan.default_runtime = opts.runtime.empty()
                           ? plan.config.config.node.default_runtime
                           : opts.runtime;
  return std::nullopt;
}

std::optional<int> open_state(const node_options& opts, node_plan& plan) {
  // One retention for the registry and the journal: what `status` shows is
  // what the journal keeps.
  plan.registry.history_limit = opts.retain_tasks > 0
                                  ? static_cast<std::size_t>(opts.retain_tasks)
                                  : std::numeric_limits<std::size_t>::max();
  plan.registry.history_max_age_s = opts.retain_days * 86400;
  plan.state_dir =
    absolute_dir(opts.state_dir.empty() ? default_state_dir() : opts.state_dir);
  // The journal, the attempts' output and the certificates' keys are kept
  // here: an existing directory other users can open is made private first.
  if (auto secured = secure_state_dir(plan.state_dir); !secured)
    return unavailable(secured.error().to_string());
  if (auto rc = open_journal(opts, plan))
    return rc;
  if (!plan.leader)
    if (auto rc = restore_journal(plan))
      return rc;
  auto tls = front_door_tls(opts.certs, plan.state_dir, opts.insecure);
  if (!tls)
    return bad(tls.error().to_string());
  plan.tls = *tls;
  if (auto rc = make_runtimes(plan))
    return rc;
  auto& reg = plan.registry;
  reg.config = plan.config.config;
  reg.seed = fresh_seed();
  reg.node_name = plan.addr.to_string();
  reg.peer_timeout_s = opts.peer_timeout_s;
  reg.worker_wait_s = opts.worker_wait_s;
  reg.workers_only = plan.leader != nullptr;
  reg.schedules = true;
  // With a journal the attempts live beside it, so a restarted node finds
  // the directories of the attempts it resumes.
  reg.attempt_root = !opts.work_dir.empty() ? absolute_dir(opts.work_dir)
                     : plan.store           ? plan.state_dir + "/attempts"
                                            : fresh_work_dir("node");
  plan.attempt_root = reg.attempt_root;
  // A long-lived node creates and removes a directory per task here
  // (fresh_work_dir marks its parent the same way).
  if (plan.store && opts.work_dir.empty()) {
    runtime::make_top_directory(plan.attempt_root);
    // One an older node made may be 0755.
    ::chmod(plan.attempt_root.c_str(), runtime::private_dir_mode);
  }
  return std::nullopt;
}

std::optional<int> restore_journal(node_plan& plan) {
  if (!plan.store)
    return std::nullopt;
  if (plan.leader) {
    plan.store->fence(plan.leader->epoch());
    plan.registry.leader_epoch = plan.leader->epoch();
  }
  // Retention first, so that what the node reads and says it keeps is what
  // it keeps.
  using namespace std::chrono;
  auto now = duration<double>(system_clock::now().time_since_epoch()).count();
  auto limit = plan.registry.history_limit;
  auto pruned =
    plan.store->prune(now, plan.registry.history_max_age_s,
                      limit == std::numeric_limits<std::size_t>::max()
                        ? 0
                        : static_cast<std::int64_t>(limit));
  if (pruned)
    plan.expired = *pruned;
  else
    spdlog::warn("journal: finished tasks past retention were not removed: "
                 "{}",
                 pruned.error().to_string());
  auto snapshot = load_journal(*plan.store);
  if (!snapshot)
    return unavailable(snapshot.error().to_string() +
                       "; the node does not start rather than lose tasks");
  for (auto& w : snapshot->warnings)
    spdlog::warn("journal: {}", w);
  plan.registry.restored = std::move(*snapshot);
  for (auto& t : plan.registry.restored.tasks)
    ++(t.finished ? plan.kept : plan.resumed);
  return std::nullopt;
}

} // namespace tasksup::app
