#pragma once

// Adoption: the process runtime takes over an attempt that a previous run
// of the node started (its shim is not our child), and follows its output
// in output.log as output.streams describes it. Private to the runtime.

#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/runtime.hpp"

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace tasksup::runtime::detail {

struct attempt;
class attempt_reaper;
class warning_sink;

/// An adopted attempt's output, read from its log as it grows.
class log_follower {
public:
  log_follower() = default;
  log_follower(const log_follower&) = delete;
  log_follower& operator=(const log_follower&) = delete;
  ~log_follower();

  /// Opens output.log and output.streams in `dir`.
  void open(const std::string& dir);

  /// Both files are open: there is a log to follow.
  bool ready() const { return log_fd_ >= 0 && index_fd_ >= 0; }

  enum class result {
    /// All that output.streams says was written has been read (or there is
    /// nothing to follow).
    done,
    /// The log is behind its index: not written yet.
    behind,
    /// `capture` filled up (only when asked to stop then).
    full,
  };

  /// Reads what output.streams says was appended to the log into
  /// `capture`, using `buffer`; stops once `capture` is full when
  /// `stop_when_full`.
  result follow(output_capture& capture, bool stop_when_full,
                std::vector<char>& buffer, warning_sink& warn);

private:
  std::string dir_;
  int log_fd_ = -1;
  int index_fd_ = -1;
  stream_index_reader index_;
  std::deque<log_segment> segments_;
  std::uint64_t log_offset_ = 0;
};

/// Takes over the attempt of `spec` into `a` (whose id and callbacks are
/// set; `sink` receives its lines): its shim watched through a pidfd, its
/// output so far replayed into the tail. When its end is already recorded,
/// `a` is exited with the record; when it cannot be adopted, `a` never ran
/// and says why (what is left of it is killed). Either way `a` is then
/// handed to the reactor.
void adopt_attempt(attempt& a, const adopt_spec& spec,
                   output_capture::line_callback sink,
                   const output_capture_limits& limits, attempt_reaper& reaper,
                   warning_sink& warn);

} // namespace tasksup::runtime::detail
