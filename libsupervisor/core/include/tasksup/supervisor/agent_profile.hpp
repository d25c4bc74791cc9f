#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/agent_output.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <boost/json/fwd.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup {

/// How to run one kind of agent CLI: the data behind an agent's
/// `"profile": "claude"`. Shipped as JSON under config/profiles/ (one file
/// per profile, named after it) and built in, so a task file can name one
/// without any config directory.
///
/// Keys of a profile file (all but `agent_cli` optional):
/// - `agent_cli`: the command an agent of this profile runs unless the agent
///   names its own.
/// - `cli_flags`: flags that make the CLI non-interactive and
///   machine-readable, split like a POSIX shell; they come before the
///   agent's own `cli_flags`.
/// - `prompt_flag` (default none): the flag that takes the prompt as its
///   value (`gemini -p PROMPT`); it is put last, right before the prompt.
/// - `prompt_as_argument` (default true): the prompt is the last argument.
/// - `env_passthrough`: names of environment variables copied from the
///   node's environment into the attempt's (API keys, base URLs). Only the
///   names listed are copied, never "everything"; a variable the node does
///   not have is left out.
/// - `output_format`: "text" (default), "claude-stream-json",
///   "codex-jsonl" or "gemini-json": which parser reads the output.
/// - `idle_timeout_s` (default 0 = off): an attempt that prints nothing and
///   does not exit for this long is stopped and classified `retryable`
///   (rule `idle_timeout`).
/// - `provider`: who serves the model ("anthropic", "openai", "google", any
///   word); agents of different providers fail independently (see
///   `fatal_scope` in the supervisor settings).
/// - `idle_noise` (default none): RE2 patterns (case-insensitive, searched
///   anywhere in the line) of output lines that are not activity: a CLI
///   that prints "Reconnecting... waiting for network" forever while
///   offline is idle all the same. Such lines are still logged; they just
///   do not restart the `idle_timeout_s` clock. An attempt stopped while
///   printing only these is classified `retryable` with rule `idle_noise`
///   (its line the last noise line), not `idle_timeout`.
struct agent_profile {
  std::string name;
  std::string agent_cli;
  std::string cli_flags;
  std::vector<std::string> args;
  std::string prompt_flag;
  bool prompt_as_argument = true;
  std::vector<std::string> env_passthrough;
  output_format output = output_format::text;
  double idle_timeout_s = 0;
  std::string provider;
  std::vector<std::string> idle_noise;
};

/// Most patterns in one `idle_noise` list, and the longest pattern.
inline constexpr std::size_t max_idle_noise_patterns = 16;
inline constexpr std::size_t max_idle_noise_pattern_bytes = 256;

/// Checks an `idle_noise` list: at most `max_idle_noise_patterns` non-empty
/// patterns of at most `max_idle_noise_pattern_bytes` that RE2 accepts.
/// Returns the index of the first bad one and why, or nullopt when all are
/// fine.
std::optional<std::pair<std::size_t, std::string>>
check_idle_noise(const std::vector<std::string>& patterns);

/// Tells idle-noise lines from activity (see `agent_profile::idle_noise`):
/// one compiled RE2 set, matched in time linear in the line, no allocation
/// per line. Immutable; copies share the compiled set.
class idle_noise_filter {
public:
  /// A filter that matches nothing.
  idle_noise_filter() = default;

  /// Compiles `patterns` (checked with `check_idle_noise` first; a list it
  /// rejects gives a filter that matches nothing).
  explicit idle_noise_filter(const std::vector<std::string>& patterns);

  /// True when `line` matches one of the patterns.
  bool is_noise(std::string_view line) const;

  /// True when there is at least one pattern.
  bool active() const noexcept { return impl_ != nullptr; }

private:
  struct impl;
  std::shared_ptr<const impl> impl_;
};

/// Longest idle timeout accepted: one week.
inline constexpr double max_idle_timeout_s = 7 * 86400.0;

/// Most names in one `env_passthrough` list.
inline constexpr std::size_t max_env_passthrough = 64;

/// True for a portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*`,
/// at most 128 bytes.
bool valid_env_name(std::string_view name) noexcept;

/// Profiles by name.
using profile_map = std::map<std::string, agent_profile>;

/// Reads a profile document. `name` is the profile's name (the file's stem);
/// errors name `where` (the file) and the JSON pointer of the bad field.
/// With a `base`, the document overrides only the keys it names (so
/// `agent_cli` is not required); without, it stands alone.
expected<agent_profile>
parse_agent_profile(const boost::json::value& doc, std::string name,
                    const std::string& where,
                    const agent_profile* base = nullptr);

/// Reads a user profile file `profiles/<name>.json`. `name` must be an id
/// (`[A-Za-z0-9_.-]{1,64}`). A file named after a built-in profile
/// overrides that profile key by key (a partial file changes only the keys
/// it names; a list such as `env_passthrough` is replaced as a whole); any
/// other file is a new profile and needs `agent_cli`.
expected<agent_profile> parse_user_profile(const boost::json::value& doc,
                                           const std::string& name,
                                           const std::string& where);

/// The built-in profiles: claude, codex, gemini, qwen and generic. The same
/// data as config/profiles/*.json (a unit test keeps them in step).
const std::map<std::string, agent_profile>& builtin_agent_profiles();

/// Looks a profile up among `extra` (user profiles), then the built-ins;
/// nullptr when neither has it. The one lookup behind every agent's
/// `"profile"`, however its task arrives.
const agent_profile* find_agent_profile(std::string_view name,
                                        const profile_map& extra = {});

/// The names `find_agent_profile` knows with `extra`, sorted, comma
/// separated (for error messages).
std::string known_agent_profiles(const profile_map& extra = {});

/// Fills an agent from its profile: the profile's command when the agent
/// names none, the profile's flags before the agent's own, the profile's
/// `env_passthrough` names before the agent's (no duplicates), its output
/// format and provider, and its idle timeout and prompt placement unless the
/// agent set them (`idle_set`, `prompt_set` say whether it did).
void apply_agent_profile(agent_spec& agent, const agent_profile& profile,
                         bool idle_set, bool prompt_set);

} // namespace tasksup
