#include "tasksup/supervisor/agent_profile.hpp"

#include "tasksup/supervisor/shlex.hpp"

#include "config_reader.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace tasksup {

namespace json = boost::json;

namespace {

/// The built-in profiles, the same text as config/profiles/<name>.json.
constexpr std::pair<std::string_view, std::string_view> builtin_texts[] = {
  {"claude", R"({
  "agent_cli": "claude",
  "cli_flags": "-p --output-format stream-json --verbose --permission-mode acceptEdits",
  "prompt_as_argument": true,
  "env_passthrough": ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                      "ANTHROPIC_MODEL", "CLAUDE_CODE_MAX_RETRIES",
                      "CLAUDE_CODE_OAUTH_TOKEN"],
  "output_format": "claude-stream-json",
  "idle_timeout_s": 600,
  "provider": "anthropic"
})"},
  {"codex", R"({
  "agent_cli": "codex",
  "cli_flags": "exec --json --skip-git-repo-check --sandbox workspace-write",
  "prompt_as_argument": true,
  "env_passthrough": ["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"],
  "output_format": "codex-jsonl",
  "idle_timeout_s": 600,
  "provider": "openai",
  "idle_noise": ["Reconnecting\\.\\.\\."]
})"},
  {"gemini", R"({
  "agent_cli": "gemini",
  "cli_flags": "--output-format json --skip-trust --approval-mode auto_edit",
  "prompt_flag": "-p",
  "prompt_as_argument": true,
  "env_passthrough": ["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL",
                      "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"],
  "output_format": "gemini-json",
  "idle_timeout_s": 600,
  "provider": "google"
})"},
  {"qwen", R"({
  "agent_cli": "qwen",
  "cli_flags": "",
  "prompt_flag": "-p",
  "prompt_as_argument": true,
  "env_passthrough": ["OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "DASHSCOPE_API_KEY"],
  "output_format": "text",
  "idle_timeout_s": 600,
  "provider": "qwen"
})"},
  {"generic", R"({
  "agent_cli": "agent",
  "cli_flags": "",
  "prompt_as_argument": true,
  "env_passthrough": [],
  "output_format": "text",
  "idle_timeout_s": 0,
  "provider": ""
})"},
};

std::string quote(std::string_view s) {
  return "\"" + std::string{s} + "\"";
}

tasksup::error fail(const std::string& where, std::string path,
                    std::string what) {
  return tasksup::error{where, std::move(path), std::move(what)};
}

/// As the classifier's: case-insensitive, Latin-1 (any bytes match), and a
/// bounded program size.
RE2::Options noise_options() {
  RE2::Options opts;
  opts.set_encoding(RE2::Options::EncodingLatin1);
  opts.set_case_sensitive(false);
  opts.set_log_errors(false);
  opts.set_max_mem(1 << 20);
  return opts;
}

/// A string without NUL bytes, or nullopt.
std::optional<std::string> text(const json::value& v) {
  if (!v.is_string())
    return std::nullopt;
  std::string s{v.as_string().data(), v.as_string().size()};
  if (s.find('\0') != std::string::npos)
    return std::nullopt;
  return s;
}

} // namespace

bool valid_env_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 128)
    return false;
  auto c0 = static_cast<unsigned char>(name.front());
  if (!(std::isalpha(c0) || c0 == '_'))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x80 && (std::isalnum(u) || u == '_');
  });
}

expected<agent_profile> parse_agent_profile(const json::value& doc,
                                            std::string name,
                                            const std::string& where,
                                            const agent_profile* base) {
  if (!doc.is_object())
    return fail(where, "", "expected a JSON object (an agent profile)");
  const auto& obj = doc.as_object();
  static constexpr std::string_view keys[] = {
    "agent_cli",          "cli_flags",       "prompt_flag",
    "prompt_as_argument", "env_passthrough", "output_format",
    "idle_timeout_s",     "provider",        "idle_noise"};
  for (const auto& kv : obj) {
    std::string_view key{kv.key().data(), kv.key().size()};
    if (std::find(std::begin(keys), std::end(keys), key) == std::end(keys))
      return fail(
        where, "/" + std::string{key},
        "unknown key in an agent profile (expected one of agent_cli, "
        "cli_flags, prompt_flag, prompt_as_argument, env_passthrough, "
        "output_format, idle_timeout_s, provider, idle_noise)");
  }
  agent_profile p = base != nullptr ? *base : agent_profile{};
  p.name = std::move(name);
  const auto* cli = obj.if_contains("agent_cli");
  if (cli == nullptr && base == nullptr)
    return fail(where, "", "missing required key \"agent_cli\"");
  if (cli != nullptr) {
    auto cli_text = text(*cli);
    if (!cli_text || cli_text->empty())
      return fail(where, "/agent_cli", "expected a non-empty command");
    p.agent_cli = std::move(*cli_text);
  }
  if (const auto* x = obj.if_contains("cli_flags")) {
    auto flags = text(*x);
    if (!flags)
      return fail(where, "/cli_flags", "expected a string of flags");
    auto args = shlex_split(*flags);
    if (!args)
      return fail(where, "/cli_flags", args.error().what);
    p.cli_flags = std::move(*flags);
    p.args = std::move(*args);
  }
  if (const auto* x = obj.if_contains("prompt_flag")) {
    auto flag = text(*x);
    if (!flag || flag->size() > 64)
      return fail(where, "/prompt_flag",
                  "expected a short flag such as \"-p\"");
    p.prompt_flag = std::move(*flag);
  }
  if (const auto* x = obj.if_contains("prompt_as_argument")) {
    if (!x->is_bool())
      return fail(where, "/prompt_as_argument", "expected true or false");
    p.prompt_as_argument = x->as_bool();
  }
  if (const auto* x = obj.if_contains("env_passthrough")) {
    if (!x->is_array())
      return fail(where, "/env_passthrough",
                  "expected an array of environment variable names");
    const auto& arr = x->as_array();
    if (arr.size() > max_env_passthrough)
      return fail(where, "/env_passthrough",
                  "at most " + std::to_string(max_env_passthrough) + " names");
    p.env_passthrough.clear();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto ptr = "/env_passthrough/" + std::to_string(i);
      auto n = text(arr[i]);
      if (!n || !valid_env_name(*n))
        return fail(where, ptr,
                    "expected an environment variable name "
                    "([A-Za-z_][A-Za-z0-9_]*)");
      if (std::find(p.env_passthrough.begin(), p.env_passthrough.end(), *n) !=
          p.env_passthrough.end())
        return fail(where, ptr, "duplicate name " + quote(*n));
      p.env_passthrough.push_back(std::move(*n));
    }
  }
  if (const auto* x = obj.if_contains("output_format")) {
    auto s = text(*x);
    auto f = s ? parse_output_format(*s) : std::nullopt;
    if (!f)
      return fail(where, "/output_format",
                  "expected one of \"text\", \"claude-stream-json\", "
                  "\"codex-jsonl\", \"gemini-json\"");
    p.output = *f;
  }
  if (const auto* x = obj.if_contains("idle_timeout_s")) {
    double v = x->is_number() ? x->to_number<double>() : -1;
    if (!x->is_number() || !std::isfinite(v) || v < 0 || v > max_idle_timeout_s)
      return fail(where, "/idle_timeout_s",
                  "expected seconds between 0 (off) and " +
                    std::to_string(static_cast<long>(max_idle_timeout_s)));
    p.idle_timeout_s = v;
  }
  if (const auto* x = obj.if_contains("provider")) {
    auto s = text(*x);
    if (!s || s->size() > 64)
      return fail(where, "/provider", "expected a short provider name");
    p.provider = std::move(*s);
  }
  if (const auto* x = obj.if_contains("idle_noise")) {
    if (!x->is_array())
      return fail(where, "/idle_noise",
                  "expected an array of patterns (RE2, case-insensitive)");
    std::vector<std::string> patterns;
    for (const auto& v : x->as_array()) {
      auto s = text(v);
      if (!s)
        return fail(where, "/idle_noise/" + std::to_string(patterns.size()),
                    "expected a pattern string");
      patterns.push_back(std::move(*s));
    }
    if (auto bad = check_idle_noise(patterns))
      return fail(where,
                  bad->first == patterns.size()
                    ? std::string{"/idle_noise"}
                    : "/idle_noise/" + std::to_string(bad->first),
                  bad->second);
    p.idle_noise = std::move(patterns);
  }
  return p;
}

std::optional<std::pair<std::size_t, std::string>>
check_idle_noise(const std::vector<std::string>& patterns) {
  if (patterns.size() > max_idle_noise_patterns)
    return std::pair{patterns.size(),
                     "at most " + std::to_string(max_idle_noise_patterns) +
                       " patterns"};
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const auto& p = patterns[i];
    if (p.empty() || p.size() > max_idle_noise_pattern_bytes ||
        p.find('\0') != std::string::npos)
      return std::pair{i, "expected a pattern of 1 to " +
                            std::to_string(max_idle_noise_pattern_bytes) +
                            " bytes"};
    RE2 re{p, noise_options()};
    if (!re.ok())
      return std::pair{i, "not a valid pattern: " + re.error()};
  }
  return std::nullopt;
}

struct idle_noise_filter::impl {
  explicit impl(RE2::Set s) : set(std::move(s)) {}
  RE2::Set set;
};

idle_noise_filter::idle_noise_filter(const std::vector<std::string>& patterns) {
  if (patterns.empty() || check_idle_noise(patterns))
    return;
  RE2::Set set{noise_options(), RE2::UNANCHORED};
  for (const auto& p : patterns)
    if (set.Add(p, nullptr) < 0)
      return;
  if (!set.Compile())
    return;
  impl_ = std::make_shared<const impl>(std::move(set));
}

bool idle_noise_filter::is_noise(std::string_view line) const {
  return impl_ != nullptr &&
         impl_->set.Match(re2::StringPiece{line.data(), line.size()}, nullptr);
}

const std::map<std::string, agent_profile>& builtin_agent_profiles() {
  static const auto profiles = [] {
    std::map<std::string, agent_profile> out;
    for (const auto& [name, body] : builtin_texts) {
      auto doc = json::parse(json::string_view{body.data(), body.size()});
      auto p = parse_agent_profile(doc, std::string{name}, "built-in profile");
      // The texts above are fixed and tested: a failure is a build defect.
      if (p)
        out.emplace(std::string{name}, std::move(*p));
    }
    return out;
  }();
  return profiles;
}

expected<agent_profile> parse_user_profile(const json::value& doc,
                                           const std::string& name,
                                           const std::string& where) {
  if (!detail::valid_identifier(name))
    return fail(where, "",
                "invalid profile name " + detail::quote(name) +
                  " (the file name must be 1 to 64 characters from "
                  "[A-Za-z0-9_.-] plus \".json\")");
  const auto& builtin = builtin_agent_profiles();
  auto it = builtin.find(name);
  return parse_agent_profile(doc, name, where,
                             it == builtin.end() ? nullptr : &it->second);
}

std::string known_agent_profiles(const profile_map& extra) {
  std::vector<std::string> names;
  for (const auto& kv : builtin_agent_profiles())
    names.push_back(kv.first);
  for (const auto& kv : extra)
    if (builtin_agent_profiles().count(kv.first) == 0)
      names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) {
    if (!out.empty())
      out += ", ";
    out += n;
  }
  return out;
}

const agent_profile* find_agent_profile(std::string_view name,
                                        const profile_map& extra) {
  std::string key{name};
  if (auto i = extra.find(key); i != extra.end())
    return &i->second;
  const auto& builtin = builtin_agent_profiles();
  if (auto i = builtin.find(key); i != builtin.end())
    return &i->second;
  return nullptr;
}

void apply_agent_profile(agent_spec& agent, const agent_profile& profile,
                         bool idle_set, bool prompt_set) {
  agent.profile = profile.name;
  if (agent.agent_cli.empty())
    agent.agent_cli = profile.agent_cli;
  std::vector<std::string> args = profile.args;
  args.insert(args.end(), agent.args.begin(), agent.args.end());
  agent.args = std::move(args);
  std::vector<std::string> env = profile.env_passthrough;
  for (auto& name : agent.env_passthrough)
    if (std::find(env.begin(), env.end(), name) == env.end())
      env.push_back(std::move(name));
  agent.env_passthrough = std::move(env);
  agent.output = profile.output;
  agent.provider = profile.provider;
  agent.idle_noise = profile.idle_noise;
  if (!idle_set)
    agent.idle_timeout_s = profile.idle_timeout_s;
  if (!prompt_set)
    agent.prompt_as_argument = profile.prompt_as_argument;
  // `gemini -p PROMPT`: the flag goes last, right before the prompt.
  if (agent.prompt_as_argument && !profile.prompt_flag.empty())
    agent.args.push_back(profile.prompt_flag);
}

} // namespace tasksup
