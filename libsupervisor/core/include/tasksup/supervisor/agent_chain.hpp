#pragma once

#include "tasksup/supervisor/agent.hpp"

#include <optional>
#include <string>
#include <vector>

namespace tasksup {

/// The ordered agents one task will try, and the problems found while
/// building it (each a warning event; docs/BEHAVIOUR.md, Agent chain).
struct agent_chain {
  std::vector<agent_spec> agents;
  std::vector<std::string> warnings;
};

/// Builds a task's chain: no selection or no agents -> `[default_agent]`;
/// otherwise start with `start_agent_id` (round-robin pick) or `agents[0]`,
/// follow `agent_fallbacks`, stop on a cycle and at a reference to an unknown
/// agent, reporting each as a warning. Example: agents [a, b, c], fallbacks
/// {a: b, b: c} -> [a, b, c]. An unknown `start_agent_id` is a warning and
/// the chain starts with agents[0].
agent_chain build_agent_chain(
  const std::optional<agent_selection>& selection,
  const agent_spec& default_agent,
  const std::optional<std::string>& start_agent_id = std::nullopt);

} // namespace tasksup
