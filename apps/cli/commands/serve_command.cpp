// `tasksup serve`: its flags and help; the node itself is run_node
// (apps/node/node.hpp), or a worker node with --join (worker_node.hpp).

#include "commands.hpp"
#include "config_location.hpp"
#include "node.hpp"
#include "node_address.hpp"
#include "node_setup.hpp"
#include "worker_node.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

/// An option's callback that stores its value, in seconds (fractions
/// allowed), in `target` as milliseconds. `target` lives in the options the
/// command's callback holds.
std::function<bool(const std::vector<std::string>&)>
seconds_into(std::chrono::milliseconds& target) {
  return [&target](const std::vector<std::string>& v) {
    target = std::chrono::milliseconds{
      static_cast<std::int64_t>(std::stod(v.at(0)) * 1000)};
    return true;
  };
}

void setup_serve(CLI::App& app, int& status) {
  auto opts = std::make_shared<node_options>();
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
  cmd->add_option(
    "--journal", opts->journal_url,
    "A PostgreSQL journal shared by coordinators, as a libpq URL "
    "(postgresql://USER@HOST:PORT/DB; keep the password in ~/.pgpass or "
    "PGPASSWORD): one leads, the others stand by and take over when it "
    "dies; attempts run on worker nodes only. Default: the SQLite journal "
    "in the state directory");
  cmd
    ->add_option("--leader-lease", opts->lease_s,
                 "With --journal: seconds a coordinator's leadership holds "
                 "without a renewal (it renews every quarter of it); a "
                 "standby takes over within about this long of the "
                 "leader's death")
    ->check(CLI::Range(0.5, 600.0))
    ->capture_default_str();
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
                 "Finished tasks older than this leave the journal and "
                 "status; describe says when and why (0: no age limit)")
    ->check(CLI::NonNegativeNumber)
    ->capture_default_str();
  cmd
    ->add_option("--retain-tasks", opts->retain_tasks,
                 "At most this many finished tasks stay in the journal and "
                 "status, the oldest leave first (0: no limit)")
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
  auto* nats =
    cmd->add_option("--nats", opts->nats.url,
                    "Take task submissions from NATS JetStream at "
                    "nats://HOST:PORT (comma-separate a cluster's servers) and "
                    "publish every event there (see NATS below)");
  cmd
    ->add_option("--nats-subject", opts->nats.subject,
                 "With --nats: the subject submissions arrive on")
    ->capture_default_str();
  cmd
    ->add_option("--nats-stream", opts->nats.stream,
                 "With --nats: the stream that holds the submissions; "
                 "created (work queue, on disk) when missing")
    ->capture_default_str();
  cmd
    ->add_option("--nats-durable", opts->nats.durable,
                 "With --nats: the durable consumer the node reads the "
                 "stream with (coordinators sharing a --journal share it)")
    ->capture_default_str();
  cmd
    ->add_option("--nats-events", opts->nats.events_prefix,
                 "With --nats: events are published on PREFIX.<task id> "
                 "(\"\": none)")
    ->capture_default_str();
  cmd
    ->add_option("--nats-max-backlog", opts->nats.max_backlog,
                 "With --nats: while the node has this many unfinished "
                 "tasks it takes no more from the stream (they wait there)")
    ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}))
    ->capture_default_str();
  cmd
    ->add_option("--nats-ack-wait", seconds_into(opts->nats.ack_wait),
                 "With --nats: seconds a message the node fetched may stay "
                 "unanswered (the node died) before NATS hands it out again "
                 "(default 30)")
    ->check(CLI::Range(0.5, 3600.0));
  auto* join =
    cmd->add_option("--join", opts->worker.join,
                    "Run as a worker node of the coordinator at HOST:PORT: "
                    "offer this node's attempt slots, runtimes and labels, and "
                    "run the attempts it places here (no journal, no tasks of "
                    "its own). Coordinators sharing a --journal: "
                    "HOST:PORT,HOST:PORT,...; the worker joins the leader and "
                    "follows it when another takes over");
  // A worker node has no tasks of its own to take.
  nats->excludes(join);
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
    ->add_option("--max-connections", opts->max_connections,
                 "Connections the node keeps open at most (also bounded by "
                 "the descriptor limit); one more closes one that has not "
                 "finished its handshakes first, a worker node's last")
    ->check(CLI::Range(std::size_t{2}, std::size_t{100000}))
    ->capture_default_str();
  cmd
    ->add_option("--worker-wait", opts->worker_wait_s,
                 "Seconds a coordinator restarted while it had worker nodes "
                 "waits for one to join again before running attempts "
                 "itself (0: no wait)")
    ->check(CLI::Range(0.0, 86400.0))
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
    ->add_option("--lease", seconds_into(opts->worker.lease),
                 "With --join: seconds without a word from the coordinator "
                 "after which this node drops the connection (default 5; keep "
                 "it below the coordinator's --peer-timeout)")
    ->check(CLI::Range(0.1, 3600.0));
  cmd
    ->add_option(
      "--failover-grace", seconds_into(opts->worker.failover_grace),
      "With --join: seconds the attempts running here outlive the "
      "connection to their coordinator, for the coordinator that takes "
      "over (or the same one, restarted) to adopt them; one that does not "
      "has them killed when this node joins it (default 60; 0: kill them "
      "with the connection)")
    ->check(CLI::Range(0.0, 86400.0));
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

NATS: with --nats the node reads task submissions (a task or a workflow as
JSON, as `submit` takes it) from --nats-subject through a durable pull
consumer, creating the stream when it is missing. A message is acked once its
task is journaled. Its task's id is its own "id", else the Nats-Msg-Id
header, else nats-<stream sequence>: a message redelivered or published again
makes no second task. A message that can never be a task (not JSON, invalid)
is terminated, its reason logged; one the node cannot take now is redelivered
later, as is all while --nats-max-backlog tasks are unfinished. Every event
is published as a CloudEvents 1.0 JSON document on --nats-events.<task id>.

A cluster: worker nodes start with --join HOST:PORT (and --name, --label
KEY=VALUE) and offer their slots, runtimes and labels; the coordinator places
each attempt on the fitting worker with the most free slots (a task's
placement.labels must all match) and keeps tasks, journal and supervisors
itself. A worker joins with the node certificate in --certs DIR (copy the
coordinator's ca.crt, node.crt and node.key there; never ca.key). A worker
lost (killed, or silent for --peer-timeout) has its attempts retried on
another at once. A worker that hears nothing for --lease drops the
connection and keeps its attempts running for --failover-grace: a
coordinator that takes over (a standby, or the same one restarted) adopts
them when the worker joins it, and they report to it as if nothing had
happened; attempts no coordinator adopts are killed. `tasksup nodes` lists
the workers.

Coordinators that outlive their machine: start several with the same
--journal postgresql://... (each with its own --listen HOST:PORT and state
directory). One takes the leader lease (holder, epoch, expiry on the
database's clock) and runs the node; the others stand by, and `tasksup
status` or `nodes` against a standby says who leads and at which address. A
leader renews its lease every quarter of --leader-lease; every commit to the
journal checks the epoch in its transaction, so a leader that was deposed
(its lease ran out, another took it) cannot write, and it exits at once with
status 75 (a service manager restarts it as a standby). A standby takes the
lease once it expires: within --leader-lease (plus a little) of a kill -9 of the
leader; a leader that stops on a signal lets its lease go at once.

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
    status = run_node(*opts);
  });
}

command_registrar registrar{40, setup_serve};

} // namespace

} // namespace tasksup::app
