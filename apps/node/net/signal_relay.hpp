#pragma once

#include "actor_setup.hpp"
#include "signal_watch.hpp"

#include <caf/replies_to.hpp>
#include <caf/send.hpp>
#include <caf/typed_actor.hpp>

#include <csignal>
#include <mutex>
#include <utility>

namespace tasksup::app {

/// What takes SIGINT and SIGTERM: `(signal, count)`, count 1 for the first.
using signal_target_actor = caf::typed_actor<caf::reacts_to<signal_atom, int>>;

/// SIGINT and SIGTERM as messages to one actor at a time (a command's own,
/// the node's, `tasksup run`'s watcher). Make it before any other thread
/// starts: they inherit the blocked signals (signal_watch.hpp). A signal
/// that comes while no actor is named is counted, and `aim` says how many
/// came, so that the new target can act on them.
class signal_relay {
public:
  signal_relay()
    : watch_{{SIGINT, SIGTERM}, [this](int, int count) {
               std::lock_guard<std::mutex> guard{mutex_};
               if (target_)
                 caf::anon_send(target_, signal_atom::value, count);
               else
                 ++missed_;
             }} {}

  signal_relay(const signal_relay&) = delete;
  signal_relay& operator=(const signal_relay&) = delete;

  /// Signals go to `target` from now on; returns how many came while no
  /// actor was named.
  int aim(signal_target_actor target) {
    std::lock_guard<std::mutex> guard{mutex_};
    target_ = std::move(target);
    return std::exchange(missed_, 0);
  }

  /// Signals go to no actor from now on (they are counted).
  void drop() { aim(signal_target_actor{}); }

private:
  std::mutex mutex_;
  signal_target_actor target_;
  int missed_ = 0;
  /// Last: its thread starts after the members it uses, and stops first.
  signal_watch watch_;
};

} // namespace tasksup::app
