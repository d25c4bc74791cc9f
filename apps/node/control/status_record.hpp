#pragma once

// A node's task statuses as the records `tasksup status` shows: the typed
// `task_status` a node answers with, joined with the times its statistics
// keep (`view`). Used by `status` over the actor connection and by the
// node's local control socket.

#include "status_view.hpp"

#include "tasksup/actors/node_stats.hpp"
#include "tasksup/actors/protocol.hpp"

#include <string>
#include <vector>

namespace tasksup::app {

/// The rows for `all`, with the times from `view_text` (the statistics'
/// `(view)` answer; empty or unreadable: no times, as from an older node).
status_answer make_status_answer(const std::vector<task_status>& all,
                                 const std::string& view_text);

/// The same rows from the statistics' typed times (`clock_atom`, on the
/// node itself): no JSON text in between.
status_answer make_status_answer(const std::vector<task_status>& all,
                                 const task_clocks& clocks);

/// The query for the page `p` of the tasks `filter` admits.
status_query make_status_query(const status_page_options& p,
                               const status_filter& filter);

/// The rows of one page (`(status, status_query)`'s answer), with its
/// times and counts.
status_answer make_status_answer(const status_page& page);

/// One schedule as `schedule list --json`, `status` and the dashboard show
/// it: name, source, timing, overlap, paused, next_ts and last_ts (seconds
/// since the epoch, null for none), running (a task id or null), runs and
/// skipped.
boost::json::object schedule_record(const schedule_info& x);

} // namespace tasksup::app
