#pragma once

// A registry on the simulated clock with scripted attempts, and the
// requests its tests make (registry_actor_test.cpp, registry_group_test.cpp).

#include "tasksup/actors/registry_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tasksup::test {

/// A registry whose events `seen` collects, running attempts on the
/// fixture's scripted runtime.
struct registry_fixture : fixture {
  std::shared_ptr<collected> seen = std::make_shared<collected>();
  caf::actor events = collector(seen);
  registry_actor reg;
  /// The registry's retention (registry_options), set before `start`.
  std::size_t history_limit = 10000;
  double history_max_age_s = 0;
  journal_snapshot restored;
  /// The registry's journal (none unless set before `start`).
  journal_actor journal_override;

  void start(config_set cfg, std::uint64_t seed = 7,
             std::string attempt_root = "/tmp/tasksup-actor-tests") {
    registry_options opts;
    opts.config = std::move(cfg);
    opts.config.node.default_agent = agent("default");
    opts.runtimes["*"] = runtime;
    opts.seed = seed;
    opts.attempt_root = std::move(attempt_root);
    opts.history_limit = history_limit;
    opts.history_max_age_s = history_max_age_s;
    opts.restored = std::move(restored);
    opts.journal = journal_override;
    reg = keep(spawn_registry(sys(), std::move(opts)));
    run();
    auto ok = ask<bool>(reg, subscribe_atom::value,
                        caf::actor_cast<subscriber_actor>(events));
    REQUIRE(ok);
  }

  std::string submit(task_spec t) {
    auto id = ask<std::string>(reg, submit_atom::value, std::move(t));
    REQUIRE(id);
    REQUIRE(*id);
    return **id;
  }

  task_status status(const std::string& id) {
    auto s = ask<task_status>(reg, status_atom::value, id);
    REQUIRE(s);
    REQUIRE(*s);
    return **s;
  }

  /// The ids `status` lists, in its order.
  std::vector<std::string> listed_ids() {
    auto all = ask<std::vector<task_status>>(reg, status_atom::value);
    REQUIRE(all);
    REQUIRE(*all);
    std::vector<std::string> out;
    for (auto& s : **all)
      out.push_back(s.task_id);
    return out;
  }

  task_result await(const std::string& id) {
    auto r = ask<task_result>(reg, await_atom::value, id);
    REQUIRE(r);
    REQUIRE(*r);
    return **r;
  }

  /// Agent ids of the started attempts of `task_id`, in order.
  std::vector<std::string> agents_started(const std::string& task_id) {
    std::vector<std::string> out;
    for (auto& c : runtime->calls())
      if (c.what == runtime::scripted_call::kind::start && c.task_id == task_id)
        out.push_back(c.agent_id);
    return out;
  }
};

} // namespace tasksup::test
