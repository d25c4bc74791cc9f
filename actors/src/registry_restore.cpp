#include "registry_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

namespace tasksup::detail {

/// A task's place in submission order: its journal number (tasks without
/// one, when there is no journal, keep their place in the queue).
std::int64_t order_of(registry_ptr self, const std::string& task_id) {
  auto& seqs = self->state.journal_seq;
  auto i = seqs.find(task_id);
  return i == seqs.end() ? std::numeric_limits<std::int64_t>::max() : i->second;
}

/// Once every rebuilt task has adopted its attempt: whatever else the old
/// node left running (an attempt it started but never recorded, a container
/// of a dead node) is killed, so no process or container is left behind.
void reap_orphans(registry_ptr self) {
  auto& st = self->state;
  if (!st.opts.journal)
    return;
  runtime::reap_spec spec;
  spec.attempt_root = st.opts.attempt_root;
  spec.owner = "serve";
  spec.dead_owners = true;
  spec.keep = std::move(st.adopted);
  st.adopted.clear();
  spec.keep_attempts = std::move(st.adopted_attempts);
  st.adopted_attempts.clear();
  std::set<runtime::container_runtime*> done;
  for (auto& [name, rt] : st.opts.runtimes) {
    if (!rt || !done.insert(rt.get()).second)
      continue;
    auto report = rt->reap(spec);
    for (auto& line : report.reaped)
      std::fprintf(stderr, "tasksup: reaped after the restart: %s\n",
                   line.c_str());
    for (auto& line : report.errors)
      std::fprintf(stderr, "tasksup: reaping after the restart: %s\n",
                   line.c_str());
  }
}

/// A rebuilt task has asked again for what it waited for (or ended). Once
/// all have, the queue is put back in submission order and served.
void resumed(registry_ptr self, const std::string& task_id) {
  auto& st = self->state;
  if (st.resuming.erase(task_id) == 0 || !st.resuming.empty())
    return;
  reap_orphans(self);
  adoptions_claimed(self);
  deliver(self, st.slots.resume([self](const std::string& id) {
    return order_of(self, id);
  }));
}

/// Rebuilds the node's tasks from the journal: finished ones as they ended,
/// unfinished ones resume.
void restore(registry_ptr self) {
  auto& st = self->state;
  auto snapshot = std::move(st.opts.restored);
  st.opts.restored = {};
  if (auto i = snapshot.node_state.find("breakers");
      i != snapshot.node_state.end())
    st.breaker->restore(i->second);
  if (auto i = snapshot.node_state.find("quotas");
      i != snapshot.node_state.end())
    st.quotas.restore(i->second);
  if (auto i = snapshot.node_state.find("budget");
      i != snapshot.node_state.end())
    st.budget.restore(i->second);
  if (auto i = snapshot.node_state.find("expired");
      i != snapshot.node_state.end())
    restore_expired(st, i->second);
  if (auto i = snapshot.node_state.find("rotation");
      i != snapshot.node_state.end()) {
    // "environment\tposition\n" lines.
    std::string_view rest = i->second;
    while (!rest.empty()) {
      auto eol = rest.find('\n');
      auto line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view{}
                                           : rest.substr(eol + 1);
      auto tab = line.find('\t');
      if (tab == std::string_view::npos)
        continue;
      st.rotation[std::string{line.substr(0, tab)}] = static_cast<std::size_t>(
        std::strtoull(std::string{line.substr(tab + 1)}.c_str(), nullptr, 10));
    }
  }
  if (st.opts.workers_only) {
    st.slots.await_nodes();
  } else if (auto i = snapshot.node_state.find("workers");
             i != snapshot.node_state.end() && !i->second.empty() &&
             st.opts.worker_wait_s > 0) {
    // Worker nodes ran this coordinator's attempts: they are retried there
    // once the workers join again, not here at once.
    std::fprintf(stderr,
                 "tasksup: waiting up to %gs for the worker nodes (%s) to "
                 "join again before running attempts here\n",
                 st.opts.worker_wait_s, i->second.c_str());
    st.slots.await_nodes();
    self->delayed_send(self,
                       std::chrono::duration_cast<caf::timespan>(
                         std::chrono::duration<double>(st.opts.worker_wait_s)),
                       worker_wait_atom::value);
  }
  // The finished tasks' journaled event counts, for the hub.
  std::map<std::string, std::int64_t> last_events;
  for (auto& e : snapshot.tasks) {
    auto id = e.task.spec.id;
    st.journal_seq[id] = e.seq;
    if (e.task.member_run != 0)
      st.member_runs[id] = e.task.member_run;
    if (e.finished) {
      st.finished.insert_or_assign(id, std::move(*e.finished));
      st.finished_order.push_back({id, e.finished_at});
      last_events[id] = e.last_event;
      continue;
    }
    supervisor_options opts;
    opts.task = std::move(e.task.spec);
    opts.trace_id = std::move(e.task.trace_id);
    opts.seed = e.task.seed;
    opts.start_agent_id = std::move(e.task.start_agent_id);
    opts.attempts_before = e.task.attempts_before;
    opts.journal_seq = e.seq;
    opts.resume = true;
    opts.replay = std::move(e.inputs);
    auto runtime_name = opts.task.runtime.empty()
                          ? st.opts.config.node.default_runtime
                          : opts.task.runtime;
    auto rt = st.opts.runtimes.find(runtime_name);
    if (rt == st.opts.runtimes.end())
      rt = st.opts.runtimes.find("*");
    if (rt == st.opts.runtimes.end() || !rt->second) {
      // The node no longer has the task's runtime: it ends, failed, with
      // the reason (its journal keeps everything before).
      task_result r;
      r.task_id = id;
      r.error = "node restarted without the runtime '" + runtime_name +
                "' this task needs";
      r.cause.reason = end_reason::runtime_missing;
      task_status s;
      s.task_id = id;
      s.environment = opts.task.environment;
      s.state = task_state::done;
      s.result = r;
      self->send(st.opts.journal, jend_atom::value, e.seq, wall_now(),
                 encode(s));
      st.finished.insert_or_assign(id, std::move(s));
      st.finished_order.push_back({id, wall_now()});
      last_events[id] = e.last_event;
      continue;
    }
    opts.runtime = rt->second;
    st.resuming.insert(id);
    auto env = opts.task.environment;
    launch(self, std::move(opts), std::move(env), e.last_event, true);
  }
  // Oldest first, as they finished (the journal gives them in submission
  // order); then retention, as the journal was pruned before it was read.
  std::stable_sort(st.finished_order.begin(), st.finished_order.end(),
                   [](const finished_entry& x, const finished_entry& y) {
                     return x.at < y.at;
                   });
  expire_finished(self, wall_now());
  // A kept finished task's history is read from the journal.
  for (auto& f : st.finished_order)
    self->send(st.hub, detail::track_atom::value, f.id, st.journal_seq[f.id],
               last_events[f.id], true);
  restore_groups(self, std::move(snapshot.groups));
}

} // namespace tasksup::detail
