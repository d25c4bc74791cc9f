#pragma once

// Notifications when a task ends: the `task_done` event (the result, as JSON)
// handed to a command on its stdin and/or POSTed to an HTTP URL. Delivery
// runs on a thread of its own with a bounded queue, so a slow or failing
// hook never holds up supervision; a failed delivery is retried with
// exponential backoff, then given up with an error in the node's log.

#include "tasksup/supervisor/expected.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tasksup::app {

/// Settings of the notifier, with their defaults.
struct notifier_options {
  /// argv of the command that receives the JSON on stdin (empty: none).
  std::vector<std::string> command;
  /// http://HOST:PORT/PATH to POST the JSON to (empty: none).
  std::string url;
  /// Outcomes that notify ("succeeded", "failed", "stopped").
  std::set<std::string> outcomes = {"succeeded", "failed", "stopped"};
  /// Deliveries tried at most (the first and the retries).
  int max_tries = 5;
  /// The first retry's delay; doubled each time, capped at `max_delay`.
  std::chrono::milliseconds first_delay{1000};
  std::chrono::milliseconds max_delay{30000};
  /// One try of the command or the POST takes at most this long.
  std::chrono::milliseconds timeout{10000};
  /// Notifications waiting at most; beyond, the oldest is dropped.
  std::size_t max_queue = 1000;
};

/// A URL the notifier can POST to.
struct http_url {
  std::string host;
  std::uint16_t port = 80;
  std::string path = "/";
};

/// Parses `http://HOST[:PORT][/PATH]` (no https, no user info).
expected<http_url> parse_http_url(const std::string& text);

/// The delay before retry `n` (1 for the first retry): `first` * 2^(n-1),
/// capped at `max`.
std::chrono::milliseconds notify_delay(int n, std::chrono::milliseconds first,
                                       std::chrono::milliseconds max);

/// What a delivery did, for the log and tests.
struct notify_report {
  std::string task_id;
  std::string target; // "command" or "url"
  int tries = 0;
  bool delivered = false;
  std::string error;
};

/// Delivers notifications on its own thread.
class notifier {
public:
  using log_fn = std::function<void(const notify_report&, bool final)>;

  /// Starts the delivery thread. `log` is called (on that thread) after
  /// every failed try and at the end of every delivery.
  notifier(notifier_options opts, log_fn log);

  /// Stops the thread; pending notifications are dropped.
  ~notifier();

  notifier(const notifier&) = delete;
  notifier& operator=(const notifier&) = delete;

  /// Offers one `task_done` event (its JSON line); queued when its outcome
  /// is one to notify. Never blocks on delivery.
  void offer(const std::string& task_id, const std::string& outcome,
             const std::string& json);

  /// Offers `json` for `task_id` to a command and/or URL of its own (a
  /// trigger's report) rather than the options', with the same retries and
  /// bounds: one delivery for each of the two given. Never blocks.
  void offer_to(const std::string& task_id, const std::string& json,
                std::vector<std::string> command, std::optional<http_url> url);

private:
  struct job {
    std::string task_id;
    std::string json;
    /// "command" or "url".
    std::string target;
    int tries = 0;
    /// The job's own command or URL; empty: the options'.
    std::vector<std::string> command;
    std::optional<http_url> url;
  };

  /// Queues `jobs`, dropping the most delayed ones beyond `max_queue`.
  void enqueue(std::vector<job> jobs);

  void run();
  std::string deliver(const job& j);

  notifier_options opts_;
  std::optional<http_url> url_;
  log_fn log_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, job> due_;
  bool stop_ = false;
  std::thread thread_;
};

/// Runs `argv` with `input` on its stdin; "" on exit 0, else why not.
std::string run_hook_command(const std::vector<std::string>& argv,
                             const std::string& input,
                             std::chrono::milliseconds timeout);

/// POSTs `body` (application/json) to `url`; "" on a 2xx answer, else why
/// not.
std::string post_json(const http_url& url, const std::string& body,
                      std::chrono::milliseconds timeout);

} // namespace tasksup::app
