#pragma once

// What the webhook endpoints remember (docs/BEHAVIOUR.md, "Webhooks" and
// "Results back"), kept in the journal as the node state "webhooks":
// - the deliveries handled, by id, so a replayed delivery does nothing
//   (the newest `max_deliveries`, none older than `delivery_memory_s`);
// - the reports waiting for their task's end: where the result of a task a
//   trigger started goes.
// Thread-safe: the webhook endpoints write it from their actors, the node's
// event loop reads it when a task ends, the reporter's thread when a report
// was delivered or given up. Each change is sent to the journal under the
// ledger's lock, so the journal gets the writes in the order they were made.

#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/supervisor/trigger.hpp"

#include <boost/json/object.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::app {

/// The journal's node-state key of the ledger.
inline constexpr std::string_view webhook_state_key = "webhooks";

/// A report waiting for (or handed out at) its task's end.
struct pending_report {
  /// The trigger's report, its command's placeholders filled in but
  /// `{{task.outcome}}`.
  trigger_report report;
  /// What the report says of the delivery (`trigger_decision::context`).
  boost::json::object context;
  /// Deliveries of it handed to the reporter and not yet ended (in memory
  /// only: after a restart a report handed out is handed out again).
  int handed = 0;
};

/// The ledger's bounds.
struct webhook_ledger_limits {
  /// Deliveries remembered at most; the oldest are forgotten first.
  std::size_t max_deliveries = 4096;
  /// A delivery is forgotten this long after it was handled (GitHub
  /// redelivers for 3 days).
  double delivery_memory_s = 7 * 24 * 3600.0;
  /// Reports waiting at most; a trigger's task beyond them starts without
  /// one (logged).
  std::size_t max_reports = 10000;
};

class webhook_ledger {
public:
  using log_fn = std::function<void(const std::string&)>;

  /// A ledger read from `saved` (the journal's node state "webhooks"; ""
  /// for none), writing to `journal` (null: it lives in memory only).
  /// Entries that cannot be read are dropped, each with a line to `warn`.
  webhook_ledger(journal_actor journal, const std::string& saved, log_fn warn,
                 webhook_ledger_limits limits = {});

  /// When delivery `id` was handled (seconds since the epoch), if it is
  /// remembered.
  std::optional<double> seen(const std::string& id) const;

  /// Records delivery `id` as handled at `now` and writes the ledger:
  /// `write` is called, under the ledger's lock, with the journal and the
  /// state's bytes, to send them as a durable write and answer the sender
  /// once it is synced. Without a journal, `write` is not called: false.
  bool record(
    const std::string& id, double now,
    const std::function<void(const journal_actor&, std::string bytes)>& write);

  /// Adds a report for `task_id` when none waits for it and there is room;
  /// whether it did (when not, `warn` says why the ledger was full).
  bool add_report(const std::string& task_id, pending_report report);

  /// Drops the report of `task_id` (its start was refused).
  void withdraw(const std::string& task_id);

  /// Task `task_id` ended with `outcome`: its report to hand to the
  /// reporter when one waits for it and names the outcome (it stays until
  /// `settled`); one that does not name it is dropped.
  std::optional<pending_report> take(const std::string& task_id,
                                     std::string_view outcome);

  /// One delivery of `task_id`'s report ended (delivered or given up): the
  /// report is dropped once none is under way.
  void settled(const std::string& task_id);

  /// The tasks with a report waiting, not yet handed out.
  std::vector<std::string> waiting() const;

  /// Deliveries and reports remembered (for tests and the log).
  std::size_t deliveries() const;
  std::size_t reports() const;

  /// The ledger as the journal keeps it.
  std::string serialize() const;

private:
  /// Forgets deliveries beyond the bounds, as of `now`.
  void trim(double now);
  /// Sends the ledger to the journal, not waiting (the caller holds the
  /// lock).
  void save();
  std::string serialize_locked() const;

  journal_actor journal_;
  log_fn warn_;
  webhook_ledger_limits limits_;
  mutable std::mutex mutex_;
  /// Delivery id -> when it was handled.
  std::map<std::string, double> deliveries_;
  /// Task id -> its report.
  std::map<std::string, pending_report> reports_;
};

} // namespace tasksup::app
