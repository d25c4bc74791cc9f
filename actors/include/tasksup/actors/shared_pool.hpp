#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tasksup {

/// Hands out one shared, immutable copy of each distinct value, so that the
/// many tasks of a node with the same settings (supervision config, agent
/// chain) hold one copy between them instead of one each; a value that
/// differs (a task's own overrides) gets a copy of its own. `Hash` and
/// `Equal` are function objects over `T`, and values equal under `Equal`
/// must behave identically to their users.
///
/// The pool holds its values weakly: a value lives while some task uses it
/// and is forgotten after its last user lets go (entries of values no longer
/// used are dropped when their hash is looked up again, or in a sweep once
/// the table has doubled). Thread-safe: supervisors start on any thread.
template<class T, class Hash, class Equal>
class shared_pool {
public:
  /// A shared copy equal to `value`: one still in use when there is one,
  /// else `value` itself, remembered for later calls.
  std::shared_ptr<const T> share(T value) {
    auto h = Hash{}(value);
    std::lock_guard<std::mutex> guard{mtx_};
    auto [i, last] = entries_.equal_range(h);
    while (i != last) {
      if (auto p = i->second.lock()) {
        if (Equal{}(*p, value))
          return p;
        ++i;
      } else {
        i = entries_.erase(i);
      }
    }
    // Allocated on its own rather than with make_shared, so that a forgotten
    // value leaves only its control block behind until its entry goes.
    std::shared_ptr<const T> p{new T(std::move(value))};
    entries_.emplace(h, p);
    if (entries_.size() >= sweep_at_)
      sweep();
    return p;
  }

  /// How many distinct values are in use.
  std::size_t size() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(),
                    [](const auto& e) { return !e.second.expired(); }));
  }

  /// How many entries the table holds, forgotten values included (at most
  /// about twice the values in use, plus a small constant).
  std::size_t entries() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return entries_.size();
  }

private:
  /// Drops the entries of values no longer in use; the next sweep comes when
  /// the table has doubled, so sweeping costs O(1) per `share`, amortized.
  void sweep() {
    for (auto i = entries_.begin(); i != entries_.end();) {
      if (i->second.expired())
        i = entries_.erase(i);
      else
        ++i;
    }
    sweep_at_ = std::max(min_sweep, 2 * entries_.size());
  }

  static constexpr std::size_t min_sweep = 64;

  mutable std::mutex mtx_;
  std::unordered_multimap<std::size_t, std::weak_ptr<const T>> entries_;
  std::size_t sweep_at_ = min_sweep;
};

} // namespace tasksup
