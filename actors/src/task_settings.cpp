#include "task_settings.hpp"

#include "supervisor_state.hpp"

#include "tasksup/actors/shared_pool.hpp"

#include "tasksup/supervisor/hash.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include "tasksup/supervisor/agent_chain.hpp"
#include "tasksup/supervisor/config.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>

#include <filesystem>
#include <functional>
#include <utility>

namespace tasksup::detail {

namespace {

/// Hashes settings consistently with `same_settings`.
struct config_hash {
  std::size_t operator()(const supervisor_config& cfg) const noexcept {
    return settings_hash(cfg);
  }
};

/// Settings that behave identically (`same_settings`).
struct config_equal {
  bool operator()(const supervisor_config& a,
                  const supervisor_config& b) const noexcept {
    return same_settings(a, b);
  }
};

/// Hashes an agent chain over every field of every agent.
struct agents_hash {
  std::size_t operator()(const std::vector<agent_spec>& agents) const {
    std::hash<std::string> str;
    std::size_t h = agents.size();
    auto mix = [&h](std::size_t x) { hash_combine(h, x); };
    for (auto& a : agents) {
      mix(str(a.agent_id));
      mix(str(a.agent_cli));
      mix(str(a.config_dir));
      mix(str(a.cli_flags));
      for (auto& arg : a.args)
        mix(str(arg));
      mix(a.prompt_as_argument ? 1 : 0);
    }
    return h;
  }
};

/// Hashes the identities of what `shared_settings_equal` compares.
struct shared_settings_hash {
  std::size_t operator()(const shared_settings& x) const {
    std::hash<const void*> ptr;
    std::size_t h = std::hash<std::string>{}(x.attempt_root) ^
                    std::hash<std::int64_t>{}(x.leader_epoch);
    auto mix = [&h](std::size_t v) { hash_combine(h, v); };
    mix(ptr(&x.machine.config()));
    mix(ptr(x.agents.get()));
    mix(ptr(x.runtime.get()));
    // A null handle (no node services) has no actor to cast.
    auto mix_actor = [&](const auto& a) {
      mix(ptr(a ? caf::actor_cast<caf::abstract_actor*>(a) : nullptr));
    };
    mix_actor(x.classifier);
    mix_actor(x.backoff);
    mix_actor(x.services);
    return h;
  }
};

/// The same settings, chain, runtime and actors (by identity) and the same
/// attempt root.
struct shared_settings_equal {
  bool operator()(const shared_settings& a, const shared_settings& b) const {
    // The settings and the chain come from their pools, so equal ones are
    // the same objects.
    return &a.machine.config() == &b.machine.config() && a.agents == b.agents &&
           a.runtime == b.runtime && a.classifier == b.classifier &&
           a.backoff == b.backoff && a.services == b.services &&
           a.attempt_root == b.attempt_root && a.leader_epoch == b.leader_epoch;
  }
};

} // namespace

std::shared_ptr<const supervisor_config> shared_config(supervisor_config cfg) {
  static shared_pool<supervisor_config, config_hash, config_equal> pool;
  return pool.share(std::move(cfg));
}

std::shared_ptr<const std::vector<agent_spec>>
shared_agents(std::vector<agent_spec> agents) {
  static shared_pool<std::vector<agent_spec>, agents_hash,
                     std::equal_to<std::vector<agent_spec>>>
    pool;
  return pool.share(std::move(agents));
}

std::shared_ptr<const shared_settings> shared_node(shared_settings x) {
  static shared_pool<shared_settings, shared_settings_hash,
                     shared_settings_equal>
    pool;
  return pool.share(std::move(x));
}

std::string done_file(const std::string& attempt_dir) {
  return attempt_dir + "/artifacts/" + std::string{runtime::done_file_name};
}

runtime::attempt_spec make_attempt_spec(const task_settings& settings,
                                        const shared_settings& node,
                                        const agent_spec& agent, int attempt,
                                        std::string_view span_id) {
  const auto& task = settings.task;
  runtime::attempt_spec spec;
  spec.task_id = task.id;
  spec.attempt = attempt;
  spec.agent_id = agent.agent_id;
  spec.argv.reserve(agent.args.size() + 2);
  spec.argv.push_back(agent.agent_cli);
  spec.argv.insert(spec.argv.end(), agent.args.begin(), agent.args.end());
  spec.env = task.env;
  if (agent.prompt_as_argument)
    spec.argv.push_back(task.prompt);
  else
    spec.env["TASKSUP_PROMPT"] = task.prompt;
  // <attempt_root>/<task id>/attempt-<n>, joined as text: task ids are
  // validated path components, and std::filesystem::path costs ~2k
  // instructions per attempt here (BENCHMARKS.md §1).
  const auto& root = node.attempt_root;
  spec.attempt_dir.reserve(root.size() + task.id.size() + 20);
  spec.attempt_dir = root;
  if (!root.empty() && root.back() != '/')
    spec.attempt_dir += '/';
  spec.attempt_dir += task.id;
  spec.attempt_dir += "/attempt-";
  spec.attempt_dir += std::to_string(attempt);
  spec.state_dir = runtime::member_state_dir(root, task.id);
  spec.workdir = task.workdir;
  for (auto& m : task.mounts)
    spec.mounts.push_back({m.host_path, m.container_path, m.read_only});
  spec.config_dir = agent.config_dir;
  spec.memory_limit_mb = task.memory_limit_mb;
  spec.image = task.image;
  // The runtime labels its containers with the task, attempt and agent
  // (and the trace) itself, and passes the trace context to the agent: as
  // fields rather than environment entries, which every runtime would copy
  // into the environment it builds (BENCHMARKS.md §9).
  if (!span_id.empty()) {
    spec.trace_id = settings.trace_id;
    spec.span_id = span_id;
  }
  // TASKSUP_DONE_FILE is the runtime's: the path as the agent sees it
  // (in a container, where its artifacts directory is mounted), on
  // whichever node runs the attempt.
  return spec;
}

supervisor_setup make_setup(caf::actor_system& sys, supervisor_options opts) {
  auto& task = opts.task;
  start_info start;
  start.ids = trace_id_generator{opts.seed};
  start.emit_submitted = opts.emit_submitted && !opts.resume;
  start.event_batches = opts.event_batches;
  start.resume = opts.resume;
  start.replay = std::move(opts.replay);
  start.journal = std::move(opts.journal);
  start.journal_seq = opts.journal_seq;
  start.attempts_before = opts.attempts_before;
  start_info::extras more;
  auto chain =
    build_agent_chain(task.selection, opts.default_agent, opts.start_agent_id);
  more.warnings = std::move(chain.warnings);
  if (!opts.resume)
    for (auto& w : task_warnings(task))
      more.warnings.push_back(std::move(w));
  more.classifier_rules = std::move(task.classifier_rules);
  if (!opts.backoff) {
    opts.backoff = spawn_backoff(sys, opts.seed);
    more.owned.push_back(opts.backoff.address());
  }
  if (!opts.classifier) {
    if (auto rules = classifier::make(default_classifier_rules())) {
      opts.classifier = spawn_classifier(sys, std::move(*rules));
      more.owned.push_back(opts.classifier.address());
    }
  }
  if (!more.warnings.empty() || more.classifier_rules || !more.owned.empty())
    start.more = std::make_unique<start_info::extras>(std::move(more));
  std::vector<std::string> providers;
  for (auto& a : chain.agents)
    providers.push_back(a.provider);
  // The answer is checked whenever there is a schema, whatever a typed
  // task's settings say.
  auto cfg = effective_settings(task);
  cfg.steps.answer = !task.answer_schema.empty();
  shared_settings node{shared_config(std::move(cfg)), std::move(providers)};
  node.agents = shared_agents(std::move(chain.agents));
  node.runtime = std::move(opts.runtime);
  node.classifier = std::move(opts.classifier);
  node.backoff = std::move(opts.backoff);
  node.services = std::move(opts.services);
  node.attempt_root =
    opts.attempt_root.empty()
      ? (std::filesystem::temp_directory_path() / "tasksup").string()
      : std::move(opts.attempt_root);
  node.leader_epoch = opts.leader_epoch;
  node.worker_timer = std::move(opts.worker_timer);
  auto settings = std::make_unique<task_settings>();
  settings->trace_id =
    opts.trace_id.empty() ? start.ids.trace_id() : std::move(opts.trace_id);
  // The generator's string grew while it was built; it is kept for the
  // task's lifetime.
  settings->trace_id.shrink_to_fit();
  settings->task = std::move(static_cast<task_attempt_fields&>(task));
  auto& hooks = static_cast<task_hook_fields&>(task);
  if (!hooks.answer_schema.empty()) {
    if (auto schema = answer_schema::compile_text(hooks.answer_schema))
      settings->answer = std::move(*schema);
    else
      settings->answer_error =
        "the task's answer schema is not valid: " + schema.error().to_string();
  }
  if (hooks.repo || !hooks.gates.empty() || hooks.preflight ||
      hooks.feedback.enabled || !hooks.answer_schema.empty())
    settings->hooks = std::make_unique<task_hook_fields>(std::move(hooks));
  supervisor_setup setup;
  setup.settings = std::move(settings);
  setup.node = shared_node(std::move(node));
  setup.start = std::move(start);
  return setup;
}

} // namespace tasksup::detail
