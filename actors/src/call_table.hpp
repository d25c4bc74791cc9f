#pragma once

// Closures that wait for a message to run them. A message carries data only
// (it may be serialized, inspected or sent to another node), so a closure
// that one actor hands to another is filed here under a number and the
// message carries the number; its receiver takes the closure out and runs
// it. Internal to the actors library.

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tasksup::detail {

/// Closures by number, filed and taken from any thread.
template<class Result>
class call_table {
public:
  using function_type = std::function<Result()>;

  /// Files `fn`; returns the number to send.
  std::uint64_t add(function_type fn) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto id = ++last_;
    fns_.emplace(id, std::move(fn));
    return id;
  }

  /// The closure filed under `id`, removed (empty: none, or taken already).
  function_type take(std::uint64_t id) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = fns_.find(id);
    if (i == fns_.end())
      return {};
    auto fn = std::move(i->second);
    fns_.erase(i);
    return fn;
  }

  /// Drops every closure (their receiver ended: none will run). They are
  /// destroyed outside the lock, as they may hold what holds this table.
  void clear() {
    std::unordered_map<std::uint64_t, function_type> dropped;
    std::lock_guard<std::mutex> guard{mtx_};
    dropped.swap(fns_);
  }

private:
  std::mutex mtx_;
  std::uint64_t last_ = 0;
  std::unordered_map<std::uint64_t, function_type> fns_;
};

} // namespace tasksup::detail
