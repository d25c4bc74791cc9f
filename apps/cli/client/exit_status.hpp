#pragma once

namespace tasksup::app {

/// Exit statuses of the tasksup program, documented in the README.
namespace exit_status {
/// Success (for `run`: the task succeeded).
inline constexpr int ok = 0;
/// Bad input: unreadable or invalid file, bad flag; nothing was run.
inline constexpr int bad_input = 2;
/// The node could not be reached or refused the request.
inline constexpr int unavailable = 3;
/// The user stopped the task (cancel or kill), like a shell's 128+SIGINT.
inline constexpr int stopped = 130;
/// A wait gave up (as timeout(1) does).
inline constexpr int timed_out = 124;
/// A coordinator deposed: another one took its shared journal over (as
/// sysexits.h's EX_TEMPFAIL: started again, it stands by).
inline constexpr int deposed = 75;
} // namespace exit_status

} // namespace tasksup::app
