// The scheduler (schedule_actor.hpp). Each schedule has one timer armed for
// its next due time; a fire asks the overlap policy (`on_fire`) what to do
// given the run still going and the one waiting, and a run's task id is the
// schedule's name and its due time, so a fire repeated after a restart (the
// node died between submitting the run and saving that it fired) finds its
// run already submitted instead of starting a second one.

#include "tasksup/actors/schedule_actor.hpp"

#include "actor_now.hpp"

#include "tasksup/supervisor/config.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>
#include <variant>

namespace tasksup {

std::string_view to_string(schedule_op x) noexcept {
  switch (x) {
    case schedule_op::list:
      return "list";
    case schedule_op::add:
      return "add";
    case schedule_op::pause:
      return "pause";
    case schedule_op::resume:
      return "resume";
    case schedule_op::remove:
      return "delete";
  }
  return "list";
}

namespace {

namespace json = boost::json;

/// One schedule and where it stands.
struct schedule_entry {
  schedule_spec spec;
  bool from_file = false;
  /// A command's schedule as it was added (JSON text), for the journal.
  std::string document;
  bool paused = false;
  /// The due time of its last fire (0: never).
  double last_s = 0;
  /// Where a catch-up after a restart starts: its last fire, or its resume
  /// (what it missed while paused is not caught up).
  double base_s = 0;
  /// Its run that has not ended yet.
  std::string running;
  /// A fire waits for the running run's end (`buffer_one`,
  /// `cancel_other`), with its due time.
  bool buffered = false;
  double buffered_s = 0;
  double next_s = 0;
  /// The generation of its armed timer: a tick of another is stale.
  std::uint64_t timer = 0;
  std::uint64_t runs = 0;
  std::uint64_t skipped = 0;
};

struct scheduler_state {
  scheduler_options opts;
  std::map<std::string, schedule_entry> entries;
  static inline const char* name = "tasksup.scheduler";
};

using scheduler_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void warn(const std::string& text) {
  std::fprintf(stderr, "tasksup: %s\n", text.c_str());
}

std::string timing_text(const schedule_timing& t) {
  if (auto* every = std::get_if<interval_timing>(&t))
    return "every " + std::to_string(every->every_s) + "s";
  auto& cron = std::get<cron_timing>(t);
  return "cron " + cron.expression + " " + cron.time_zone;
}

schedule_info info_of(const std::string& name, const schedule_entry& e) {
  schedule_info x;
  x.name = name;
  x.source = e.from_file ? "file" : "command";
  x.timing = timing_text(e.spec.timing);
  x.overlap = std::string{to_string(e.spec.overlap)};
  x.paused = e.paused;
  x.next_s = e.next_s; // 0 while paused (`arm`)
  x.last_s = e.last_s;
  x.running = e.running;
  x.runs = e.runs;
  x.skipped = e.skipped;
  return x;
}

/// What survives a restart, as the journal's node state "schedules".
void save(scheduler_ptr self) {
  auto& st = self->state;
  if (!st.opts.journal)
    return;
  json::array all;
  for (auto& [name, e] : st.entries) {
    json::object o;
    o["name"] = name;
    o["source"] = e.from_file ? "file" : "command";
    if (!e.from_file)
      o["document"] = e.document;
    o["paused"] = e.paused;
    o["last_s"] = e.last_s;
    o["base_s"] = e.base_s;
    o["running"] = e.running;
    o["runs"] = e.runs;
    o["skipped"] = e.skipped;
    all.emplace_back(std::move(o));
  }
  json::object doc;
  doc["schedules"] = std::move(all);
  self->send(st.opts.journal, jstate_atom::value, std::string{"schedules"},
             json::serialize(doc));
}

void submit(scheduler_ptr self, const std::string& name, double due_s);

/// The task of schedule `name`'s run due at `due_s`, parsed as a submitted
/// task file is.
expected<task_spec> run_task(scheduler_ptr self, const std::string& name,
                             const schedule_entry& e, double due_s) {
  auto doc = e.spec.task;
  doc["id"] = schedule_run_id(name, due_s);
  return parse_task(json::value(std::move(doc)), "schedule '" + name + "'",
                    self->state.opts.config);
}

/// Run `id` of schedule `name` ended (or cannot be awaited): a fire that
/// waited for it starts now.
void run_ended(scheduler_ptr self, const std::string& name,
               const std::string& id) {
  auto i = self->state.entries.find(name);
  if (i == self->state.entries.end() || i->second.running != id)
    return;
  auto& e = i->second;
  e.running.clear();
  if (e.buffered) {
    e.buffered = false;
    submit(self, name, e.buffered_s);
  }
  save(self);
}

/// Waits for run `id`'s end (asked again when the host's await times out).
void await_run(scheduler_ptr self, const std::string& name,
               const std::string& id) {
  self->request(self->state.opts.host, caf::infinite, await_atom::value, id)
    .then([self, name, id](const task_result&) { run_ended(self, name, id); },
          [self, name, id](const caf::error& err) {
            if (is_error(err, protocol_error::await_timeout))
              await_run(self, name, id);
            else
              run_ended(self, name, id);
          });
}

void submit(scheduler_ptr self, const std::string& name, double due_s) {
  auto& e = self->state.entries.at(name);
  auto task = run_task(self, name, e, due_s);
  if (!task) {
    warn("schedule '" + name +
         "': its run cannot start: " + task.error().to_string());
    return;
  }
  auto id = task->id;
  e.running = id;
  ++e.runs;
  self
    ->request(self->state.opts.host, caf::infinite, submit_atom::value,
              std::move(*task))
    .then([self, name, id](const std::string&) { await_run(self, name, id); },
          [self, name, id](const caf::error& err) {
            // Submitted before a restart: that run is this one.
            if (is_error(err, protocol_error::duplicate_task)) {
              await_run(self, name, id);
              return;
            }
            warn("schedule '" + name + "': run '" + id +
                 "' was refused: " + error_text(err));
            run_ended(self, name, id);
          });
}

/// Schedule `name` is due at `due_s`: its overlap policy decides.
void fire(scheduler_ptr self, const std::string& name, double due_s) {
  auto& e = self->state.entries.at(name);
  switch (on_fire(e.spec.overlap, !e.running.empty(), e.buffered)) {
    case fire_decision::start:
      submit(self, name, due_s);
      break;
    case fire_decision::skip:
      ++e.skipped;
      break;
    case fire_decision::buffer:
      e.buffered = true;
      e.buffered_s = due_s;
      break;
    case fire_decision::cancel_then_start:
      e.buffered = true;
      e.buffered_s = due_s;
      self
        ->request(self->state.opts.host, caf::infinite, stop_atom::value,
                  e.running, stop_mode::cancel)
        .then([](bool) {}, [](const caf::error&) {});
      break;
  }
  e.last_s = std::max(e.last_s, due_s);
  e.base_s = std::max(e.base_s, due_s);
  save(self);
}

/// Ticks schedule `name`'s timer `timer` in `delay_s` seconds (just past
/// them, so the tick is never early on the actor clock).
void wake_in(scheduler_ptr self, const std::string& name, std::uint64_t timer,
             double delay_s) {
  auto delay = std::chrono::duration<double>(std::max(0.0, delay_s));
  self->delayed_send(self,
                     std::chrono::duration_cast<caf::timespan>(delay) +
                       std::chrono::microseconds{1},
                     schedule_tick_atom::value, name, timer);
}

/// Arms schedule `name`'s timer for its next due time after now.
void arm(scheduler_ptr self, const std::string& name) {
  auto& e = self->state.entries.at(name);
  ++e.timer;
  e.next_s = 0;
  if (e.paused)
    return;
  auto now = detail::now_s(self);
  auto next = next_after(e.spec.timing, now);
  if (!next)
    return;
  e.next_s = *next;
  wake_in(self, name, e.timer, *next - now);
}

void tick(scheduler_ptr self, const std::string& name, std::uint64_t timer) {
  auto i = self->state.entries.find(name);
  if (i == self->state.entries.end() || i->second.timer != timer ||
      i->second.paused || i->second.next_s == 0)
    return;
  auto& e = i->second;
  auto now = detail::now_s(self);
  if (now < e.next_s) {
    // Early (the timer's clock and the wall clock drifted): wait the rest.
    wake_in(self, name, timer, e.next_s - now);
    return;
  }
  fire(self, name, e.next_s);
  arm(self, name);
}

/// Schedule `name` after a restart: its run still going is awaited, and
/// the runs it missed (at most its `catchup`) fire now.
void catch_up(scheduler_ptr self, const std::string& name) {
  auto& e = self->state.entries.at(name);
  if (!e.running.empty())
    await_run(self, name, e.running);
  if (e.paused || e.base_s <= 0)
    return;
  auto plan =
    plan_catchup(e.spec.timing, e.base_s, detail::now_s(self), e.spec.catchup);
  if (plan.dropped)
    warn("schedule '" + name + "': missed more runs than its catchup (" +
         std::to_string(e.spec.catchup) + ") while the node was down; " +
         std::to_string(plan.run_s.size()) + " run now");
  for (auto due : plan.run_s)
    fire(self, name, due);
}

/// The entries from the config's files and the journal's saved state.
void restore(scheduler_ptr self) {
  auto& st = self->state;
  for (auto& [name, spec] : st.opts.config.schedules) {
    schedule_entry e;
    e.spec = spec;
    e.from_file = true;
    st.entries.emplace(name, std::move(e));
  }
  if (st.opts.saved.empty())
    return;
  boost::system::error_code ec;
  auto doc = json::parse(st.opts.saved, ec);
  const json::array* all = nullptr;
  if (!ec && doc.is_object())
    if (auto* x = doc.get_object().if_contains("schedules"))
      all = x->if_array();
  if (all == nullptr) {
    warn("the journal's schedules cannot be read; schedules start afresh");
    return;
  }
  auto text = [](const json::object& o, const char* key) {
    auto* x = o.if_contains(key);
    return x != nullptr && x->is_string() ? std::string{x->get_string()}
                                          : std::string{};
  };
  auto number = [](const json::object& o, const char* key) {
    auto* x = o.if_contains(key);
    return x != nullptr && x->is_number() ? x->to_number<double>() : 0.0;
  };
  for (auto& v : *all) {
    auto* o = v.if_object();
    if (o == nullptr)
      continue;
    auto name = text(*o, "name");
    if (!valid_schedule_name(name))
      continue;
    auto i = st.entries.find(name);
    if (text(*o, "source") == "file") {
      // Gone from the config directory: gone.
      if (i == st.entries.end())
        continue;
    } else {
      if (i != st.entries.end()) {
        warn("schedule '" + name +
             "' was added by a command, and a file now has that name: the "
             "file's is kept");
        continue;
      }
      auto document = text(*o, "document");
      auto parsed = parse_json_text(document, "schedule '" + name + "'");
      auto spec = parsed ? parse_schedule(*parsed, "schedule '" + name + "'")
                         : expected<schedule_spec>{parsed.error()};
      if (!spec) {
        warn("the journal's schedule '" + name +
             "' cannot be read again: " + spec.error().to_string());
        continue;
      }
      schedule_entry e;
      e.spec = std::move(*spec);
      e.document = std::move(document);
      i = st.entries.emplace(name, std::move(e)).first;
    }
    auto& e = i->second;
    auto* paused = o->if_contains("paused");
    e.paused = paused != nullptr && paused->is_bool() && paused->get_bool();
    e.last_s = number(*o, "last_s");
    e.base_s = number(*o, "base_s");
    e.running = text(*o, "running");
    e.runs = static_cast<std::uint64_t>(std::max(0.0, number(*o, "runs")));
    e.skipped =
      static_cast<std::uint64_t>(std::max(0.0, number(*o, "skipped")));
  }
}

caf::result<std::vector<schedule_info>> refused(protocol_error code,
                                                const std::string& text) {
  return make_error(code, text);
}

caf::result<std::vector<schedule_info>> handle(scheduler_ptr self,
                                               const schedule_request& req) {
  auto& st = self->state;
  auto op = req.op;
  auto& name = req.name;
  auto& document = req.document;
  // Loading rejects other values; checked again because an in-process
  // sender skips the deserializer.
  if (!detail::valid_enum_value(op))
    return refused(protocol_error::invalid_task, "unknown schedule request");
  std::vector<schedule_info> out;
  if (op == schedule_op::list) {
    for (auto& [n, e] : st.entries)
      out.push_back(info_of(n, e));
    return out;
  }
  if (!valid_schedule_name(name))
    return refused(
      protocol_error::invalid_task,
      "a schedule name is 1 to " + std::to_string(max_schedule_name) +
        " letters, digits, '_', '.' or '-'; got '" + name.substr(0, 80) + "'");
  if (op == schedule_op::add && document.size() > wire::max_task_json_bytes)
    return refused(protocol_error::invalid_task,
                   "a schedule's document is at most " +
                     std::to_string(wire::max_task_json_bytes) + " bytes");
  auto i = st.entries.find(name);
  if (op == schedule_op::add) {
    if (i != st.entries.end())
      return refused(protocol_error::duplicate_task,
                     "a schedule named '" + name + "' exists already" +
                       (i->second.from_file
                          ? " (its file is in the config directory)"
                          : "; delete it first to replace it"));
    auto where = "schedule '" + name + "'";
    auto parsed = parse_json_text(document, where);
    // Its task must parse now, not at its first fire.
    auto spec = parsed ? check_schedule(*parsed, name, where, st.opts.config)
                       : expected<schedule_spec>{parsed.error()};
    if (!spec)
      return refused(protocol_error::invalid_task, spec.error().to_string());
    schedule_entry e;
    e.spec = std::move(*spec);
    e.document = document;
    st.entries.emplace(name, std::move(e));
    arm(self, name);
    save(self);
    out.push_back(info_of(name, st.entries.at(name)));
    return out;
  }
  if (i == st.entries.end())
    return refused(protocol_error::unknown_task,
                   "no schedule named '" + name + "'");
  auto& e = i->second;
  switch (op) {
    case schedule_op::pause:
      e.paused = true;
      arm(self, name);
      break;
    case schedule_op::resume:
      if (e.paused) {
        e.paused = false;
        e.base_s = std::max(e.base_s, detail::now_s(self));
        arm(self, name);
      }
      break;
    case schedule_op::remove:
      if (e.from_file)
        return refused(protocol_error::invalid_task,
                       "schedule '" + name +
                         "' is a file of the config directory "
                         "(schedules/" +
                         name +
                         ".json): remove the file and restart the node, or "
                         "pause it");
      out.push_back(info_of(name, e));
      st.entries.erase(i);
      save(self);
      return out;
    case schedule_op::list:
    case schedule_op::add:
      break;
  }
  save(self);
  out.push_back(info_of(name, e));
  return out;
}

scheduler_actor::behavior_type scheduler(scheduler_ptr self,
                                         scheduler_options opts) {
  self->state.opts = std::move(opts);
  restore(self);
  for (auto& [name, e] : self->state.entries) {
    catch_up(self, name);
    arm(self, name);
  }
  save(self);
  return {
    [=](schedule_atom, const schedule_request& req) {
      return handle(self, req);
    },
    [=](schedule_tick_atom, const std::string& name, std::uint64_t timer) {
      tick(self, name, timer);
    },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys,
                                scheduler_options opts) {
  return sys.spawn(scheduler, std::move(opts));
}

} // namespace tasksup
