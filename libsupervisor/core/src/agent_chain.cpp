#include "tasksup/supervisor/agent_chain.hpp"

#include <map>
#include <set>

namespace tasksup {

namespace {

std::string quoted(const std::string& id) {
  std::string out;
  out.reserve(id.size() + 2);
  out += '"';
  out += id;
  out += '"';
  return out;
}

} // namespace

agent_chain
build_agent_chain(const std::optional<agent_selection>& selection,
                  const agent_spec& default_agent,
                  const std::optional<std::string>& start_agent_id) {
  agent_chain out;
  if (!selection || selection->agents.empty()) {
    out.agents.push_back(default_agent);
    return out;
  }
  const auto& agents = selection->agents;
  // Index by id; the first definition of a duplicated id wins.
  std::map<std::string, const agent_spec*> by_id;
  for (const auto& ag : agents) {
    if (!by_id.emplace(ag.agent_id, &ag).second)
      out.warnings.push_back("agent id " + quoted(ag.agent_id) +
                             " is defined twice; using the first definition");
  }
  const agent_spec* current = &agents.front();
  if (start_agent_id) {
    if (auto i = by_id.find(*start_agent_id); i != by_id.end())
      current = i->second;
    else
      out.warnings.push_back("start agent " + quoted(*start_agent_id) +
                             " is unknown; starting with " +
                             quoted(agents.front().agent_id));
  }
  std::set<std::string> seen;
  for (;;) {
    out.agents.push_back(*current);
    seen.insert(current->agent_id);
    auto link = selection->agent_fallbacks.find(current->agent_id);
    if (link == selection->agent_fallbacks.end())
      break;
    const auto& next_id = link->second;
    auto next = by_id.find(next_id);
    if (next == by_id.end()) {
      out.warnings.push_back("fallback of " + current->agent_id +
                             " names unknown agent " + quoted(next_id) +
                             "; the chain stops there");
      break;
    }
    if (seen.count(next_id) > 0) {
      out.warnings.push_back("fallback cycle: " + current->agent_id + " -> " +
                             next_id + " stops the chain");
      break;
    }
    current = next->second;
  }
  return out;
}

} // namespace tasksup
