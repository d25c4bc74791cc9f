#pragma once

// Times and durations as people read them, shared by the decision texts and
// every view (CLI, events, dashboard's server side).

#include <cstddef>
#include <string>

namespace tasksup {

/// A duration in its largest units: `450ms`, `2.5s`, `45s`, `12m`, `3m05s`,
/// `2h13m`. Negative or non-finite input reads as `0s`.
std::string human_duration(double seconds);

/// When `at_s` (seconds since the Unix epoch) falls, in this host's local
/// time: `15:00` when it is within a day of `now_s`, else `Nov 29 15:00`.
std::string clock_time(double at_s, double now_s);

/// A reset time relative to `now_s`: `at 15:00 (in 2h13m)`; `now` once it
/// has passed.
std::string reset_time_text(double at_s, double now_s);

/// A restart in words: `restart 3, ran 2m stably` (`stable`: the run before
/// lasted `intensity.reset_after_s`), or `restart 3, ran 4s`.
std::string restart_words(std::size_t restart, double ran_s, bool stable);

} // namespace tasksup
