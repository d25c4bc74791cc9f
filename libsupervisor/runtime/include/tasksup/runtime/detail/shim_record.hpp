#pragma once

// The files tasksup-shim keeps in an attempt's directory, so that a process
// runtime that did not start the attempt (the node restarted) can re-attach
// to it or read how it ended. Shared by the shim and the runtime; every
// reader treats the files as untrusted (a crash can truncate them, anyone
// with access to the directory can write them).

#include "tasksup/supervisor/expected.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace tasksup::runtime::detail {

/// The shim's and the agent's identity (written once the agent started).
inline constexpr std::string_view shim_record_name = "shim.pid";
/// How the agent ended (written once, when it ended).
inline constexpr std::string_view exit_record_name = "exit.status";
/// Which stream each byte of output.log came from.
inline constexpr std::string_view stream_index_name = "output.streams";
/// The shim's program name, as found in /proc/<pid>/cmdline.
inline constexpr std::string_view shim_program = "tasksup-shim";

/// Largest record file accepted.
inline constexpr std::size_t max_record_bytes = 8192;

/// Contents of `shim.pid`.
struct shim_record {
  pid_t shim_pid = 0;
  /// Start time of the process in clock ticks after boot (field 22 of
  /// /proc/<pid>/stat): with the pid, it names one process for the life of
  /// the machine, so a reused pid is told apart.
  std::uint64_t shim_start = 0;
  pid_t agent_pid = 0;
  /// The agent leads its own process group: always equal to `agent_pid`.
  pid_t agent_pgid = 0;
  std::uint64_t agent_start = 0;
  /// The attempt's memory cgroup directory, empty when it has none.
  std::string cgroup;
};

/// Contents of `exit.status`.
struct exit_record {
  /// False when the agent never ran (a failure of the runtime, `error`).
  bool started = true;
  int exit_code = 0;
  /// The signal that ended the agent, 0 if none (then `exit_code` is its
  /// exit status; otherwise 128 + `signal`).
  int signal = 0;
  /// Bytes of output the log's cap kept out of output.log.
  std::uint64_t bytes_not_logged = 0;
  /// From the agent's start to its end, as the shim measured it.
  std::uint64_t duration_us = 0;
  /// Set when the shim could not run the agent or lost it; one line.
  std::string error;
  /// Things the operator should know (one line each, at most 16).
  std::vector<std::string> warnings;
};

std::string format_shim_record(const shim_record& r);

/// Parses `text` read from `path`; rejects anything but a complete record
/// of this version (the error names the file and the field).
expected<shim_record> parse_shim_record(std::string_view text,
                                        const std::string& path);

std::string format_exit_record(const exit_record& r);

expected<exit_record> parse_exit_record(std::string_view text,
                                        const std::string& path);

/// Writes `content` to `path` through a temporary file in the same
/// directory and a rename, so a reader sees all of it or nothing. Returns
/// the error, empty on success.
std::string write_file_atomically(const std::string& path,
                                  std::string_view content);

/// Reads a file of at most `max_bytes`; a missing file is an error whose
/// `field` is "missing".
expected<std::string> read_small_file(const std::string& path,
                                      std::size_t max_bytes = max_record_bytes);

/// Field 22 of /proc/<pid>/stat, or nothing when the process is gone (or
/// the file is not as the kernel writes it).
std::optional<std::uint64_t> process_start_time(pid_t pid);

/// Field 5 (the process group) of /proc/<pid>/stat.
std::optional<pid_t> process_group_of(pid_t pid);

/// True when `pid` is, right now, the shim of `attempt_dir` that the record
/// names: its start time is `start` and its command line is tasksup-shim
/// with `--attempt-dir attempt_dir`, or a task's serving shim with `--serve`
/// and the directory `attempt_dir` is in. A pid read from a file is
/// signalled only after this check.
bool is_shim_of(pid_t pid, std::uint64_t start, const std::string& attempt_dir);

/// Kills (SIGKILL) every process of process group `pgid` that started no
/// earlier than `not_before` (the agent's start time: members it forked
/// start later, a process that reused the number earlier cannot be one of
/// them) — but only when one of them is an attempt's process, by its
/// environment: TASKSUP_ARTIFACTS_DIR=`<attempt_dir>/artifacts`, which the
/// runtime gives every agent. A record that names someone else's group
/// kills nothing. Works when the group's leader is gone. Returns how many
/// processes were signalled.
std::size_t kill_group_members(pid_t pgid, std::uint64_t not_before,
                               const std::string& attempt_dir);

/// True when /proc/<pid>/environ holds `entry` ("NAME=value").
bool environment_has(pid_t pid, std::string_view entry);

/// One attempt, as the process runtime asks a serving shim
/// (`tasksup-shim --serve`) to run it: what a per-attempt shim takes on its
/// command line, plus the agent's working directory and environment (a
/// serving shim runs in neither).
struct shim_request {
  std::string attempt_dir;
  std::uint64_t log_bytes = 0;
  std::uint64_t drain_ms = 0;
  std::uint64_t group_ms = 0;
  /// The memory cgroup directory the agent joins; empty for none.
  std::string cgroup;
  std::string cwd;
  std::vector<std::string> argv;
  /// "NAME=value" entries, the agent's whole environment.
  std::vector<std::string> env;
};

/// Largest request a serving shim reads (the payload, not its length).
inline constexpr std::size_t max_request_bytes = 16 * 1024 * 1024;

/// The request's payload: a header, then NUL-terminated key and value
/// strings. On the socket it follows its length (4 bytes, little-endian).
std::string encode_shim_request(const shim_request& r);

/// Parses a payload from `encode_shim_request`; rejects anything else (an
/// unknown key, a missing field, a relative directory, no command).
expected<shim_request> parse_shim_request(std::string_view payload);

/// What a serving shim says once an attempt is over (exit record written,
/// the agent's group gone, its output forwarded and the pipes closed):
/// `end <n>\n` and the `n` bytes of the exit record it wrote, so the
/// runtime need not read exit.status back.
std::string encode_attempt_end(std::string_view exit_record_text);

/// Reads an attempt's end from `bytes`, all the socket has given since the
/// agent's pid: the exit record's text once all of it has arrived, an empty
/// optional while more is to come, an error when `bytes` is not an end (or
/// holds more than one).
expected<std::optional<std::string_view>>
parse_attempt_end(std::string_view bytes);

/// Sends a request to a serving shim on `sock`: the payload's length, then
/// the payload, with `out` and `err` (the pipes it forwards the agent's
/// stdout and stderr to) on the first byte. False when the shim is gone or
/// did not take it all within `timeout`.
bool send_shim_request(int sock, std::string_view payload, int out, int err,
                       std::chrono::milliseconds timeout);

/// Sends `bytes` on `sock` with the descriptors `out` and `err` on the
/// first byte (what `send_shim_request` sends its frame with).
bool send_with_fds(int sock, std::string_view bytes, int out, int err,
                   std::chrono::milliseconds timeout);

/// One run of bytes in output.log.
struct log_segment {
  /// 'o' stdout, 'e' stderr, 'n' a note of tasksup's own.
  char kind = 'o';
  std::uint64_t bytes = 0;
};

/// Reads output.streams incrementally: complete lines only, so a record the
/// shim is still writing is taken on the next call.
class stream_index_reader {
public:
  /// Takes more bytes of the file; returns the complete segments in them,
  /// or an error for a line that is not `o N`, `e N` or `n N`.
  expected<std::vector<log_segment>> feed(std::string_view bytes,
                                          const std::string& path);

private:
  std::string partial_;
};

} // namespace tasksup::runtime::detail
