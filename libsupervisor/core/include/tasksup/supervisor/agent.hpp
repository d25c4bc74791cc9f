#pragma once

#include "tasksup/supervisor/agent_output.hpp"

#include <map>
#include <string>
#include <vector>

namespace tasksup {

/// One agent an attempt can run (docs/BEHAVIOUR.md, Words).
struct agent_spec {
  /// Unique within its environment.
  std::string agent_id;
  /// Command name (looked up in PATH) or path.
  std::string agent_cli;
  /// Optional host directory passed to the agent (mounted into containers,
  /// exported as TASKSUP_AGENT_CONFIG_DIR for processes); `~` is expanded at
  /// load time.
  std::string config_dir;
  /// The flags as written in the config file, kept for display.
  std::string cli_flags;
  /// `cli_flags` split like a POSIX shell (see shlex.hpp), at load time.
  std::vector<std::string> args;
  /// When false the prompt is not appended as the last argument (for agents
  /// that read it from TASKSUP_PROMPT instead). Default true.
  bool prompt_as_argument = true;
  /// The agent profile it was built from (agent_profile.hpp), empty if none.
  std::string profile;
  /// Names of environment variables copied from the node's environment into
  /// each attempt's (never all of them); missing ones are left out.
  std::vector<std::string> env_passthrough;
  /// Which parser reads its output (from the profile).
  output_format output = output_format::text;
  /// Seconds without output or exit after which an attempt is stopped and
  /// classified retryable (rule `idle_timeout`); 0 = off.
  double idle_timeout_s = 0;
  /// Who serves its model ("anthropic", "openai", ...), empty if unknown.
  std::string provider;
  /// Patterns of output lines that do not count as activity for
  /// `idle_timeout_s` (from the profile; see `agent_profile::idle_noise`).
  std::vector<std::string> idle_noise;
  /// The account (API key, subscription login) whose usage quota the agent
  /// spends, shared by every agent that names it; empty means the agent's
  /// own. A used-up quota closes the account for every task until it
  /// resets.
  std::string account;

  /// The account a used-up quota closes: `account`, else the agent id.
  const std::string& quota_account() const noexcept {
    return account.empty() ? agent_id : account;
  }
};

/// True when every field of `a` and `b` is equal.
inline bool operator==(const agent_spec& a, const agent_spec& b) {
  // Fails to compile when a field is added, so that it is compared too.
  const auto& [a_id, a_cli, a_dir, a_flags, a_args, a_prompt, a_profile, a_env,
               a_output, a_idle, a_provider, a_noise, a_account] = a;
  const auto& [b_id, b_cli, b_dir, b_flags, b_args, b_prompt, b_profile, b_env,
               b_output, b_idle, b_provider, b_noise, b_account] = b;
  return a_id == b_id && a_cli == b_cli && a_dir == b_dir &&
         a_flags == b_flags && a_args == b_args && a_prompt == b_prompt &&
         a_profile == b_profile && a_env == b_env && a_output == b_output &&
         a_idle == b_idle && a_provider == b_provider && a_noise == b_noise &&
         a_account == b_account;
}

/// True when some field of `a` and `b` differs.
inline bool operator!=(const agent_spec& a, const agent_spec& b) {
  return !(a == b);
}

/// How the starting agent is picked (docs/BEHAVIOUR.md, Agent chain).
enum class selection_mode {
  /// Always start with `agents[0]`.
  fallback,
  /// The registry rotates the starting agent across tasks of an environment.
  round_robin,
};

/// The ordered agents of a task or environment and their fallback links.
struct agent_selection {
  std::vector<agent_spec> agents;
  /// agent_id -> agent_id to fall back to.
  std::map<std::string, std::string> agent_fallbacks;
  selection_mode mode = selection_mode::fallback;
};

} // namespace tasksup
