#include "tasksup/actors/journal_actor.hpp"

#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include "tasksup/supervisor/bounded_number.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>
#include <variant>

namespace tasksup {

namespace {

/// A group's row as a restarted node reads it.
expected<journal_group_entry>
load_group(const journal::stored_task& t,
           const std::map<std::int64_t, journal::unfinished_task>& pending,
           std::vector<std::string>& warnings) {
  auto what = "group '" + t.id + "'";
  journal_group_entry e;
  e.seq = t.seq;
  e.id = t.id;
  auto group = decode_group(t.spec, what, &warnings);
  if (!group)
    return group.error();
  e.group = std::move(*group);
  if (t.finished_at) {
    auto end = decode_group_end(t.result, what + ", end", &warnings);
    if (!end)
      return end.error();
    e.finished = std::move(*end);
    e.finished_at = *t.finished_at;
  } else if (auto p = pending.find(t.seq); p != pending.end()) {
    e.last_event = p->second.last_event;
    e.inputs.reserve(p->second.records.size());
    for (auto& r : p->second.records) {
      auto in = decode_group_input(
        r.body, what + ", record " + std::to_string(r.n), &warnings);
      if (!in)
        return in.error();
      e.inputs.push_back(*in);
    }
  }
  return e;
}

} // namespace

expected<journal_snapshot> load_journal(journal::journal_store& store) {
  journal_snapshot out;
  auto tasks = store.tasks();
  if (!tasks)
    return tasks.error();
  auto pending = store.unfinished();
  if (!pending)
    return pending.error();
  out.tasks.reserve(tasks->size());
  for (auto& t : *tasks) {
    if (is_group_row(t.spec)) {
      auto g = load_group(t, *pending, out.warnings);
      if (!g)
        return g.error();
      out.groups.push_back(std::move(*g));
      continue;
    }
    auto what = "task '" + t.id + "'";
    journal_entry e;
    e.seq = t.seq;
    e.submitted_at = t.submitted_at;
    auto spec = decode_task(t.spec, what, &out.warnings);
    if (!spec)
      return spec.error();
    e.task = std::move(*spec);
    if (t.finished_at) {
      auto status = decode_status(t.result, what + ", result", &out.warnings);
      if (!status)
        return status.error();
      e.finished = std::move(*status);
      e.finished_at = *t.finished_at;
    } else if (auto p = pending->find(t.seq); p != pending->end()) {
      auto& records = p->second.records;
      e.last_event = p->second.last_event;
      e.inputs.reserve(records.size());
      for (auto& r : records) {
        auto in = decode_input(r.body, what + ", record " + std::to_string(r.n),
                               &out.warnings);
        if (!in)
          return in.error();
        e.inputs.push_back(std::move(*in));
      }
    }
    out.tasks.push_back(std::move(e));
  }
  for (auto* key : {"breakers", "budget", "rotation", "quotas", "workers",
                    "schedules", "webhooks", "expired"}) {
    auto body = store.state(key);
    if (!body)
      return body.error();
    if (*body)
      out.node_state.emplace(key, std::move(**body));
  }
  return out;
}

namespace {

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// Writes, applied together at the next commit.
struct task_op {
  std::string id;
  std::string bytes;
  double at;
  bool replace;
  caf::response_promise rp;
  /// The task's number, once added.
  std::int64_t seq = 0;
};
struct input_op {
  std::int64_t seq;
  std::int64_t n;
  std::string bytes;
  /// Answered only once on disk (someone outside is told of it).
  bool durable;
  caf::response_promise rp;
};
struct event_op {
  std::int64_t seq;
  std::int64_t n;
  /// Rendered here, off the registry's thread.
  event ev;
};
struct end_op {
  std::int64_t seq;
  double at;
  std::string bytes;
};
struct state_op {
  std::string key;
  std::string bytes;
  /// Pending when someone waits for the write to be synced.
  caf::response_promise rp;
};
struct forget_op {
  std::string id;
};
using write_op =
  std::variant<task_op, input_op, event_op, end_op, state_op, forget_op>;
// Written writes are counted by their index here.
static_assert(std::variant_size_v<write_op> == journal_write_kinds.size());

/// How long a write nobody waits for may wait for a commit: the writes of
/// that time share one (a write someone waits for commits them at once).
constexpr std::chrono::milliseconds later_within{20};

/// The log's syncer: `(jsync)` -> true once what was committed is on disk.
using wal_syncer_actor =
  caf::typed_actor<caf::replies_to<jsync_atom>::with<bool>>;

struct journal_state {
  std::shared_ptr<journal::journal_store> store;
  journal_retention retention;
  journal_deposed_hook on_deposed;
  std::vector<write_op> batch;
  /// Syncs the log on a thread of its own (sync mode full), so commits go
  /// on meanwhile; absent with normal.
  wal_syncer_actor syncer;
  /// Committed writes whose requests are answered once synced to disk:
  /// those the sync under way covers, and those committed since.
  std::vector<write_op> syncing;
  std::vector<write_op> to_sync;
  bool flush_pending = false;
  bool later_pending = false;
  /// Set while commits (or syncs) fail (e.g. a full disk): why.
  std::optional<std::string> failing;
  /// Counters for /metrics (the gauges are read when asked).
  journal_figures figures;
  static inline const char* name = "tasksup.journal";
};

using journal_actor_t = journal_actor::stateful_base<journal_state>;

/// Commits after the messages already queued: they share one commit.
void schedule_flush(journal_actor_t* self) {
  if (self->state.flush_pending)
    return;
  self->state.flush_pending = true;
  self->send(self, jflush_atom::value);
}

/// Commits within `later_within`, unless a commit comes sooner.
void flush_later(journal_actor_t* self) {
  auto& st = self->state;
  if (st.flush_pending || st.later_pending)
    return;
  st.later_pending = true;
  self->delayed_send(self, later_within, jlater_atom::value);
}

/// Tries again in a second (commits or syncs fail meanwhile).
void retry_flush(journal_actor_t* self) {
  auto& st = self->state;
  if (st.flush_pending || st.batch.empty())
    return;
  st.flush_pending = true;
  self->delayed_send(self, std::chrono::seconds(1), jflush_atom::value);
}

/// Notes that commits fail, saying why once.
void note_failure(journal_actor_t* self, const tasksup::error& err) {
  auto& st = self->state;
  auto why = err.to_string();
  ++st.figures.commit_failures;
  // The store names a full disk (or its size limit) in these words.
  st.figures.disk_full = why.find("is full") != std::string::npos;
  if (!st.failing)
    std::fprintf(stderr, "tasksup: journal: %s (retrying every second)\n",
                 why.c_str());
  st.failing = std::move(why);
}

/// Counts one successful group commit that took `took`.
void count_commit(journal_figures& f,
                  std::chrono::steady_clock::duration took) {
  auto s = std::chrono::duration<double>(took).count();
  ++f.commits;
  f.commit_seconds += s;
  std::size_t i = 0;
  while (i < journal_commit_buckets.size() && s > journal_commit_buckets[i])
    ++i;
  ++f.commit_buckets[i];
}

/// Applies one write; a task's number is kept for its reply.
struct apply_op {
  journal::journal_store& store;

  expected<bool> operator()(task_op& x) const {
    if (x.replace)
      if (auto ok = store.drop_task(x.id); !ok)
        return ok;
    auto added = store.add_task(x.id, x.bytes, x.at);
    if (!added)
      return added.error();
    x.seq = *added;
    return true;
  }
  expected<bool> operator()(input_op& x) const {
    return store.add_record(x.seq, x.n, x.bytes);
  }
  expected<bool> operator()(event_op& x) const {
    return store.add_event(x.seq, x.n, static_cast<int>(x.ev.kind),
                           x.ev.json());
  }
  expected<bool> operator()(end_op& x) const {
    return store.end_task(x.seq, x.at, x.bytes);
  }
  expected<bool> operator()(state_op& x) const {
    return store.put_state(x.key, x.bytes);
  }
  expected<bool> operator()(forget_op& x) const {
    return store.drop_task(x.id);
  }
};

/// Whether `op`'s request is answered only once its write is on disk: a
/// submission's client is told the task's id, a durable input's effect (a
/// control reply, a delivery, the task's end) is seen outside the node.
/// Everything else is answered once committed: an attempt's progress
/// survives a crash of the node at once; one lost with the machine took its
/// attempts with it, and the restarted node sets aside attempt directories
/// it has no record of.
bool answered_when_synced(const write_op& op) {
  if (std::holds_alternative<task_op>(op))
    return true;
  if (auto* s = std::get_if<state_op>(&op))
    return s->rp.pending();
  auto* in = std::get_if<input_op>(&op);
  return in && in->durable;
}

/// The promise of a write someone waits for besides a submission's.
caf::response_promise* waiting(write_op& op) {
  if (auto* in = std::get_if<input_op>(&op); in && in->rp.pending())
    return &in->rp;
  if (auto* s = std::get_if<state_op>(&op); s && s->rp.pending())
    return &s->rp;
  return nullptr;
}

void answer(write_op& op) {
  if (auto* t = std::get_if<task_op>(&op))
    t->rp.deliver(t->seq);
  else if (auto* rp = waiting(op))
    rp->deliver(true);
}

/// Answers `ops`, whose writes are on disk.
void answer_synced(journal_actor_t* self, std::vector<write_op>& ops) {
  for (auto& op : ops)
    answer(op);
  ops.clear();
  if (self->state.batch.empty())
    self->state.failing.reset();
}

/// Starts a sync of what was committed unless one is under way (then the
/// next starts when it ends: one sync covers every commit made before it).
/// A failed sync is tried again a second later; the commits stay, nothing
/// is written twice.
void start_sync(journal_actor_t* self) {
  auto& st = self->state;
  if (st.to_sync.empty() || !st.syncing.empty())
    return;
  if (!st.syncer) {
    answer_synced(self, st.to_sync);
    return;
  }
  st.syncing = std::move(st.to_sync);
  st.to_sync.clear();
  self->request(st.syncer, caf::infinite, jsync_atom::value)
    .then(
      [self](bool) {
        auto& st = self->state;
        ++st.figures.syncs;
        answer_synced(self, st.syncing);
        start_sync(self);
      },
      [self](caf::error& err) {
        auto& st = self->state;
        note_failure(self, tasksup::error{st.store->path(), "",
                                          self->system().render(err)});
        // First in line again, before what was committed since.
        std::move(st.to_sync.begin(), st.to_sync.end(),
                  std::back_inserter(st.syncing));
        st.to_sync = std::move(st.syncing);
        st.syncing.clear();
        self->delayed_send(self, std::chrono::seconds(1), jsync_atom::value);
      });
}

/// Syncs on this thread and answers everything waiting for a sync (the node
/// shuts down: nothing is left waiting).
void sync_now(journal_actor_t* self) {
  auto& st = self->state;
  if (st.syncing.empty() && st.to_sync.empty())
    return;
  if (!st.store->sync())
    return;
  answer_synced(self, st.syncing);
  answer_synced(self, st.to_sync);
}

/// Another coordinator leads the shared journal: nothing more commits, so
/// whoever waits is told, the owner hears why, and the journal stops.
void deposed(journal_actor_t* self, const std::string& why) {
  auto& st = self->state;
  std::fprintf(stderr, "tasksup: journal: %s\n", why.c_str());
  auto err = make_error(protocol_error::journal_failed, why);
  for (auto* ops : {&st.batch, &st.syncing, &st.to_sync})
    for (auto& op : *ops)
      if (auto* t = std::get_if<task_op>(&op))
        t->rp.deliver(err);
      else if (auto* rp = waiting(op))
        rp->deliver(err);
  if (st.on_deposed)
    st.on_deposed(why);
  self->quit(err);
}

void flush(journal_actor_t* self) {
  auto& st = self->state;
  st.flush_pending = false;
  if (st.batch.empty())
    return;
  auto batch = std::move(st.batch);
  st.batch.clear();
  std::vector<std::optional<tasksup::error>> refused(batch.size());
  std::optional<tasksup::error> failure;
  auto started = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < batch.size() && !failure; ++i) {
    auto ok = std::visit(apply_op{*st.store}, batch[i]);
    if (ok)
      continue;
    if (st.store->last_failure_transient()) {
      failure = ok.error();
    } else {
      // This write can never succeed (e.g. an id that exists): it alone is
      // refused; the others go on.
      refused[i] = ok.error();
      std::fprintf(stderr, "tasksup: journal: %s\n",
                   ok.error().to_string().c_str());
    }
  }
  if (!failure)
    if (auto ok = st.store->commit(); !ok)
      failure = ok.error();
  if (!failure) {
    st.failing.reset();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& op = batch[i];
      if (refused[i]) {
        if (auto* t = std::get_if<task_op>(&op))
          t->rp.deliver(make_error(
            protocol_error::journal_failed,
            "task '" + t->id + "' not accepted: " + refused[i]->to_string()));
        else
          answer(op);
        continue;
      }
      ++st.figures.written[op.index()];
      if (answered_when_synced(op))
        st.to_sync.push_back(std::move(op));
      else
        answer(op);
    }
    count_commit(st.figures, std::chrono::steady_clock::now() - started);
    start_sync(self);
    return;
  }
  st.store->rollback();
  if (st.store->deposed()) {
    // Nothing of this batch will ever commit: its requests are answered
    // with why, with everything else that waits.
    std::move(batch.begin(), batch.end(), std::back_inserter(st.batch));
    deposed(self, failure->to_string());
    return;
  }
  note_failure(self, *failure);
  // A submission is refused at once (its client is told why); everything
  // of the accepted tasks is kept and retried, so nothing they did is lost.
  auto why = failure->to_string();
  for (auto& op : batch) {
    if (auto* t = std::get_if<task_op>(&op)) {
      t->rp.deliver(make_error(protocol_error::journal_failed,
                               "task '" + t->id + "' not accepted: " + why));
      continue;
    }
    st.batch.push_back(std::move(op));
  }
  retry_flush(self);
}

/// Queues a node-state write; with a pending `rp`, someone waits for it to
/// be synced, so it commits at once.
void put_state(journal_actor_t* self, std::string key, std::string bytes,
               caf::response_promise rp) {
  bool waited_for = rp.pending();
  self->state.batch.emplace_back(
    state_op{std::move(key), std::move(bytes), std::move(rp)});
  if (waited_for)
    schedule_flush(self);
  else
    flush_later(self);
}

std::vector<event> history(journal_actor_t* self, std::int64_t seq,
                           const std::string& task_id) {
  std::vector<event> out;
  auto rows = self->state.store->events(seq);
  if (!rows)
    return out;
  out.reserve(rows->size());
  for (auto& r : *rows) {
    event ev;
    ev.kind = static_cast<event_kind>(r.kind);
    if (!detail::valid_enum_value(ev.kind))
      continue;
    ev.task_id = task_id;
    // The head fields are in every event's JSON.
    std::string_view trace_id;
    std::string_view span_id;
    boost::json::error_code ec;
    auto doc = boost::json::parse(r.json, ec);
    if (!ec && doc.is_object()) {
      auto& o = doc.get_object();
      if (auto* a = o.if_contains("attempt"); a && a->is_int64())
        ev.attempt = static_cast<int>(a->get_int64());
      if (auto* t = o.if_contains("ts"); t && t->is_number())
        ev.ts = clamp_number(t->to_number<double>(), 0, wire::max_number);
      if (auto* t = o.if_contains("trace_id"); t && t->is_string())
        trace_id = t->get_string();
      if (auto* s = o.if_contains("span_id"); s && s->is_string())
        span_id = s->get_string();
    }
    ev.body = json_event_body(trace_id, span_id, std::move(r.json));
    out.push_back(std::move(ev));
  }
  return out;
}

void prune(journal_actor_t* self) {
  auto& st = self->state;
  auto& r = st.retention;
  if (st.batch.empty() && !st.failing) {
    auto n = st.store->prune(wall_now(), r.max_age_s, r.max_count);
    if (n && st.store->commit())
      st.figures.pruned += static_cast<std::uint64_t>(*n);
    else if (!n)
      st.store->rollback();
  }
  if (r.interval_s > 0)
    self->delayed_send(self,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::duration<double>(r.interval_s)),
                       jprune_atom::value);
}

journal_actor::behavior_type
journal_impl(journal_actor_t* self,
             std::shared_ptr<journal::journal_store> store,
             journal_retention retention, journal_deposed_hook on_deposed) {
  auto& st = self->state;
  st.store = std::move(store);
  st.retention = retention;
  st.on_deposed = std::move(on_deposed);
  if (auto log = st.store->background_syncer())
    st.syncer = self->spawn<caf::detached + caf::linked>(
      [](wal_syncer_actor::pointer, std::shared_ptr<journal::wal_syncer> log)
        -> wal_syncer_actor::behavior_type {
        return {
          [log](jsync_atom) -> caf::result<bool> {
            auto ok = log->sync();
            if (!ok)
              return make_error(protocol_error::journal_failed,
                                ok.error().to_string());
            return true;
          },
        };
      },
      std::shared_ptr<journal::wal_syncer>{std::move(log)});
  // Whatever arrived before the node shuts the journal down is committed
  // and synced.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    flush(self);
    sync_now(self);
    self->quit(msg.reason);
  });
  prune(self);
  return {
    [=](jtask_atom, std::string& id, std::string& bytes, double at,
        bool replace) -> caf::result<std::int64_t> {
      auto& st = self->state;
      // Also while commits fail: the submission is tried with the next
      // commit (within a second while retrying), so a disk that has room
      // again is noticed by a submission too, not only by a running task's
      // next write; if it still fails, the submission is refused with why.
      auto rp = self->make_response_promise<std::int64_t>();
      st.batch.emplace_back(
        task_op{std::move(id), std::move(bytes), at, replace, rp});
      schedule_flush(self);
      return rp;
    },
    [=](jinput_atom, std::int64_t seq, std::int64_t n, std::string& bytes,
        bool durable) -> caf::result<bool> {
      auto rp = self->make_response_promise<bool>();
      self->state.batch.emplace_back(
        input_op{seq, n, std::move(bytes), durable, rp});
      schedule_flush(self);
      return rp;
    },
    [=](jrecord_atom, std::int64_t seq, std::int64_t n, std::string& bytes) {
      self->state.batch.emplace_back(
        input_op{seq, n, std::move(bytes), false, caf::response_promise{}});
      flush_later(self);
    },
    [=](jevent_atom, std::int64_t seq, std::int64_t n, event& ev) {
      self->state.batch.emplace_back(event_op{seq, n, std::move(ev)});
      flush_later(self);
    },
    [=](jend_atom, std::int64_t seq, double at, std::string& bytes) {
      self->state.batch.emplace_back(end_op{seq, at, std::move(bytes)});
      flush_later(self);
    },
    [=](jforget_atom, std::string& id) {
      self->state.batch.emplace_back(forget_op{std::move(id)});
      flush_later(self);
    },
    [=](jstate_atom, std::string& key, std::string& bytes) {
      put_state(self, std::move(key), std::move(bytes), {});
    },
    [=](jstate_atom, std::string& key, std::string& bytes,
        bool durable) -> caf::result<bool> {
      if (!durable) {
        put_state(self, std::move(key), std::move(bytes), {});
        return true;
      }
      auto rp = self->make_response_promise<bool>();
      put_state(self, std::move(key), std::move(bytes), rp);
      return rp;
    },
    [=](jhistory_atom, std::int64_t seq,
        const std::string& task_id) -> std::vector<event> {
      // Whatever is queued for this task first.
      flush(self);
      return history(self, seq, task_id);
    },
    [=](jflush_atom) { flush(self); },
    [=](jlater_atom) {
      self->state.later_pending = false;
      flush(self);
    },
    // A failed sync, tried again.
    [=](jsync_atom) { start_sync(self); },
    [=](jstats_atom) {
      auto& st = self->state;
      auto f = st.figures;
      f.pending = st.batch.size();
      f.failing = st.failing.has_value();
      f.disk_full = f.failing && f.disk_full;
      if (auto s = st.store->stats()) {
        f.bytes = s->bytes;
        f.tasks = s->tasks;
        f.unfinished = s->unfinished;
      }
      return f;
    },
    [=](jprune_atom) { prune(self); },
  };
}

} // namespace

journal_actor spawn_journal(caf::actor_system& sys,
                            std::unique_ptr<journal::journal_store> store,
                            journal_retention retention,
                            journal_deposed_hook on_deposed) {
  return sys.spawn<caf::detached>(
    journal_impl, std::shared_ptr<journal::journal_store>{std::move(store)},
    retention, std::move(on_deposed));
}

} // namespace tasksup
