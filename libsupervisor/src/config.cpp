#include "tasksup/supervisor/config.hpp"

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/shlex.hpp"

#include <boost/json/parser.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <utility>

namespace tasksup {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// -- limits on untrusted input ------------------------------------------------

/// Config and task files larger than this are rejected before parsing.
constexpr std::size_t max_file_bytes = 16 * 1024 * 1024;

/// Nesting deeper than this is rejected by the JSON parser.
constexpr unsigned max_json_depth = 64;

/// Any duration in seconds: at most one year, so that conversions to clock
/// durations cannot overflow.
constexpr double max_seconds = 365.0 * 24 * 3600;

/// Upper bound of `memory_limit_mb` (16 TiB); keeps the byte count in range.
constexpr std::int64_t max_memory_limit_mb = std::int64_t{1} << 24;

/// Ids (task ids, agent ids, environment names) are path components and
/// labels: [A-Za-z0-9_.-]{1,64}, and neither "." nor "..".
constexpr std::size_t max_id_length = 64;

constexpr int max_int = std::numeric_limits<int>::max();

// -- messages -----------------------------------------------------------------

/// Quotes untrusted text for an error message: escapes quotes, backslashes and
/// non-printable bytes, and shortens long text, so a hostile key cannot flood
/// or garble a terminal.
std::string quote(std::string_view str) {
  constexpr std::size_t max_shown = 80;
  std::string out = "\"";
  std::size_t shown = 0;
  for (unsigned char c : str) {
    if (shown++ == max_shown) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

template<class Names>
std::string join_quoted(const Names& names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty())
      out += ", ";
    out += '"';
    out += name;
    out += '"';
  }
  return out;
}

template<class Names>
std::string join_plain(const Names& names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty())
      out += ", ";
    out += name;
  }
  return out;
}

/// RFC 6901: `~` -> `~0`, `/` -> `~1`.
std::string child(const std::string& path, std::string_view key) {
  std::string out = path;
  out += '/';
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& path, std::size_t index) {
  return path + '/' + std::to_string(index);
}

bool is_id_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

bool valid_identifier(std::string_view str) noexcept {
  return !str.empty() && str.size() <= max_id_length && str != "." &&
         str != ".." && std::all_of(str.begin(), str.end(), is_id_char);
}

// -- the reader ---------------------------------------------------------------

/// Unwinds from deep inside a document to the public function that started
/// the parse, which turns it into an `expected`. Never leaves this file.
struct parse_failure {
  error err;
};

/// Typed access to a JSON document with errors naming `where`, the JSON
/// pointer and what was expected.
class reader {
public:
  explicit reader(std::string_view where) : where_(where) {}

  [[noreturn]] void fail(const std::string& path, std::string what) const {
    throw parse_failure{error{where_, path, std::move(what)}};
  }

  const std::string& where() const noexcept { return where_; }

  const json::object& object(const json::value& v,
                             const std::string& path) const {
    if (!v.is_object())
      fail(path, "expected an object");
    return v.get_object();
  }

  const json::array& array(const json::value& v,
                           const std::string& path) const {
    if (!v.is_array())
      fail(path, "expected an array");
    return v.get_array();
  }

  std::string string(const json::value& v, const std::string& path) const {
    if (!v.is_string())
      fail(path, "expected a string");
    const auto& str = v.get_string();
    return std::string{str.data(), str.size()};
  }

  std::string nonempty_string(const json::value& v,
                              const std::string& path) const {
    auto str = string(v, path);
    if (str.empty())
      fail(path, "expected a non-empty string");
    return str;
  }

  std::string identifier(const json::value& v, const std::string& path,
                         std::string_view what) const {
    auto str = string(v, path);
    if (!valid_identifier(str))
      fail(path, "expected " + std::string{what} +
                   " of 1 to 64 characters from [A-Za-z0-9_.-] (not \".\" "
                   "or \"..\"), got " +
                   quote(str));
    return str;
  }

  bool boolean(const json::value& v, const std::string& path) const {
    if (!v.is_bool())
      fail(path, "expected true or false");
    return v.get_bool();
  }

  /// An integer in [lo, hi]; JSON numbers with a fraction or exponent are
  /// not integers here.
  std::int64_t integer(const json::value& v, const std::string& path,
                       std::int64_t lo, std::int64_t hi) const {
    if (v.is_int64()) {
      auto x = v.get_int64();
      if (x < lo || x > hi)
        integer_range_error(path, lo, hi);
      return x;
    }
    if (v.is_uint64()) {
      auto x = v.get_uint64();
      if (x > static_cast<std::uint64_t>(hi))
        integer_range_error(path, lo, hi);
      return static_cast<std::int64_t>(x);
    }
    integer_range_error(path, lo, hi);
  }

  int int_value(const json::value& v, const std::string& path, int lo,
                int hi = max_int) const {
    return static_cast<int>(integer(v, path, lo, hi));
  }

  /// A finite number of at least `lo` (above `lo` when `lo_open`) and at most
  /// `hi`.
  double number(const json::value& v, const std::string& path, double lo,
                bool lo_open, double hi) const {
    double x = 0;
    if (v.is_double())
      x = v.get_double();
    else if (v.is_int64())
      x = static_cast<double>(v.get_int64());
    else if (v.is_uint64())
      x = static_cast<double>(v.get_uint64());
    else
      fail(path, "expected a number");
    if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
      std::string what = "expected a finite number ";
      what += lo_open ? "> " : ">= ";
      what += format_number(lo);
      what += " and <= ";
      what += format_number(hi);
      fail(path, std::move(what));
    }
    return x;
  }

  /// Seconds: a number in [0, one year], or (0, one year] when `positive`.
  double seconds(const json::value& v, const std::string& path,
                 bool positive = false) const {
    return number(v, path, 0.0, positive, max_seconds);
  }

  /// Fails on the first key of `obj` not in `allowed`, naming it and listing
  /// the allowed ones.
  void check_keys(const json::object& obj, const std::string& path,
                  std::initializer_list<std::string_view> allowed) const {
    for (const auto& kv : obj) {
      std::string_view key{kv.key().data(), kv.key().size()};
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(child(path, key), "unknown key " + quote(key) +
                                 " (allowed: " + join_plain(allowed) + ")");
    }
  }

  const json::value& required(const json::object& obj, const std::string& path,
                              std::string_view key) const {
    const auto* v = obj.if_contains(key);
    if (v == nullptr)
      fail(path, "missing required key " + quote(key));
    return *v;
  }

private:
  [[noreturn]] void integer_range_error(const std::string& path,
                                        std::int64_t lo,
                                        std::int64_t hi) const {
    if (hi == std::numeric_limits<std::int64_t>::max() || hi == max_int) {
      if (lo == 0)
        fail(path, "expected a non-negative integer");
      if (lo == 1)
        fail(path, "expected a positive integer");
      fail(path, "expected an integer >= " + std::to_string(lo));
    }
    fail(path, "expected an integer from " + std::to_string(lo) + " to " +
                 std::to_string(hi));
  }

  static std::string format_number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return buf;
  }

  std::string where_;
};

template<class Enum, class Parse,
         class Names = std::initializer_list<std::string_view>>
Enum enum_value(const reader& r, const json::value& v, const std::string& path,
                Parse parse, const Names& names) {
  auto str = r.string(v, path);
  if (auto x = parse(str))
    return *x;
  r.fail(path, "expected one of " + join_quoted(names) + ", got " + quote(str));
}

/// The names of `all_error_classes`, in their order.
const std::vector<std::string_view>& class_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (auto cls : all_error_classes)
      out.push_back(to_string(cls));
    return out;
  }();
  return names;
}

error_class class_value(const reader& r, const json::value& v,
                        const std::string& path) {
  return enum_value<error_class>(r, v, path, parse_error_class, class_names());
}

/// An object key naming an error class.
error_class class_key(const reader& r, std::string_view key,
                      const std::string& path) {
  if (auto cls = parse_error_class(key))
    return *cls;
  r.fail(child(path, key), "unknown error class " + quote(key) +
                             " (expected one of " + join_quoted(class_names()) +
                             ")");
}

/// Expands a leading `~` or `~/` with $HOME; other paths are returned as
/// they are (`~user` is not expanded).
std::string expand_home(const reader& r, std::string path,
                        const std::string& ptr) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/'))
    return path;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    r.fail(ptr, "cannot expand " + quote(path) + ": HOME is not set");
  return std::string{home} + path.substr(1);
}

// -- supervisor settings ------------------------------------------------------

void read_backoff_spec(const reader& r, const json::value& v,
                       const std::string& path, backoff_spec& spec) {
  const auto& obj = r.object(v, path);
  r.check_keys(
    obj, path,
    {"kind", "table_s", "initial_s", "multiplier", "max_s", "jitter"});
  if (const auto* x = obj.if_contains("kind")) {
    auto str = r.string(*x, child(path, "kind"));
    if (str == "table")
      spec.kind = backoff_spec::kind_t::table;
    else if (str == "exponential")
      spec.kind = backoff_spec::kind_t::exponential;
    else
      r.fail(child(path, "kind"),
             "expected one of \"table\", \"exponential\", got " + quote(str));
  }
  if (const auto* x = obj.if_contains("table_s")) {
    auto ptr = child(path, "table_s");
    const auto& arr = r.array(*x, ptr);
    constexpr std::size_t max_entries = 1000;
    if (arr.size() > max_entries)
      r.fail(ptr,
             "expected at most " + std::to_string(max_entries) + " entries");
    spec.table_s.clear();
    for (std::size_t i = 0; i < arr.size(); ++i)
      spec.table_s.push_back(r.seconds(arr[i], child(ptr, i)));
  }
  if (const auto* x = obj.if_contains("initial_s"))
    spec.initial_s = r.seconds(*x, child(path, "initial_s"));
  if (const auto* x = obj.if_contains("multiplier"))
    spec.multiplier =
      r.number(*x, child(path, "multiplier"), 1.0, false, 100.0);
  if (const auto* x = obj.if_contains("max_s"))
    spec.max_s = r.seconds(*x, child(path, "max_s"));
  else if (spec.kind == backoff_spec::kind_t::table && !spec.table_s.empty() &&
           obj.if_contains("table_s") != nullptr)
    // A table without an explicit cap is capped by its largest entry.
    spec.max_s = *std::max_element(spec.table_s.begin(), spec.table_s.end());
  if (const auto* x = obj.if_contains("jitter"))
    spec.jit = enum_value<jitter>(r, *x, child(path, "jitter"), parse_jitter,
                                  {"none", "full", "equal", "decorrelated"});
  if (spec.kind == backoff_spec::kind_t::table && spec.table_s.empty())
    r.fail(path, "a \"table\" schedule needs a non-empty \"table_s\"");
  if (spec.kind == backoff_spec::kind_t::exponential &&
      spec.max_s < spec.initial_s)
    r.fail(path, "\"max_s\" must be at least \"initial_s\" for an "
                 "\"exponential\" schedule");
}

void read_supervisor(const reader& r, const json::value& v,
                     const std::string& path, supervisor_config& cfg) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"max_retries_per_agent", "enable_fallback",
                "backoff_base_seconds", "rate_limit_backoff_base",
                "max_total_attempts", "max_crash_restarts", "actions",
                "restart", "intensity", "backoff", "deadline_s", "stop_grace_s",
                "fatal_scope"});
  if (const auto* x = obj.if_contains("max_retries_per_agent"))
    cfg.max_retries_per_agent =
      r.int_value(*x, child(path, "max_retries_per_agent"), 0);
  if (const auto* x = obj.if_contains("enable_fallback"))
    cfg.enable_fallback = r.boolean(*x, child(path, "enable_fallback"));
  if (const auto* x = obj.if_contains("backoff_base_seconds"))
    cfg.backoff_base_seconds =
      r.seconds(*x, child(path, "backoff_base_seconds"));
  if (const auto* x = obj.if_contains("rate_limit_backoff_base"))
    cfg.rate_limit_backoff_base =
      r.seconds(*x, child(path, "rate_limit_backoff_base"));
  if (const auto* x = obj.if_contains("max_total_attempts"))
    cfg.max_total_attempts =
      r.int_value(*x, child(path, "max_total_attempts"), 1);
  if (const auto* x = obj.if_contains("max_crash_restarts"))
    cfg.max_crash_restarts =
      r.int_value(*x, child(path, "max_crash_restarts"), 0);
  if (const auto* x = obj.if_contains("actions")) {
    auto ptr = child(path, "actions");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string_view key{kv.key().data(), kv.key().size()};
      auto cls = class_key(r, key, ptr);
      cfg.actions[cls] =
        enum_value<action>(r, kv.value(), child(ptr, key), parse_action,
                           {"retry", "fallback", "fail"});
    }
  }
  if (const auto* x = obj.if_contains("restart"))
    cfg.restart = enum_value<restart_type>(
      r, *x, child(path, "restart"), parse_restart_type,
      {"transient", "permanent", "temporary"});
  if (const auto* x = obj.if_contains("intensity")) {
    auto ptr = child(path, "intensity");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr, {"max_restarts", "period_s", "reset_after_s"});
    if (const auto* y = sub.if_contains("max_restarts"))
      cfg.intensity.max_restarts =
        r.int_value(*y, child(ptr, "max_restarts"), 0);
    if (const auto* y = sub.if_contains("period_s"))
      cfg.intensity.period_s = r.seconds(*y, child(ptr, "period_s"), true);
    if (const auto* y = sub.if_contains("reset_after_s"))
      cfg.intensity.reset_after_s = r.seconds(*y, child(ptr, "reset_after_s"));
  }
  if (const auto* x = obj.if_contains("backoff")) {
    auto ptr = child(path, "backoff");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string_view key{kv.key().data(), kv.key().size()};
      auto cls = class_key(r, key, ptr);
      // A class already overridden below keeps the fields this object does
      // not name.
      auto spec = cfg.backoff.count(cls) ? cfg.backoff[cls] : backoff_spec{};
      read_backoff_spec(r, kv.value(), child(ptr, key), spec);
      cfg.backoff[cls] = std::move(spec);
    }
  }
  if (const auto* x = obj.if_contains("deadline_s")) {
    if (x->is_null())
      cfg.deadline_s.reset();
    else
      cfg.deadline_s = r.seconds(*x, child(path, "deadline_s"), true);
  }
  if (const auto* x = obj.if_contains("stop_grace_s"))
    cfg.stop_grace_s = r.seconds(*x, child(path, "stop_grace_s"));
  if (const auto* x = obj.if_contains("fatal_scope"))
    cfg.fatal =
      enum_value<fatal_scope>(r, *x, child(path, "fatal_scope"),
                              parse_fatal_scope, {"provider", "task"});
}

// -- classifier rules ---------------------------------------------------------

classifier_rule read_rule(const reader& r, const json::value& v,
                          const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"id", "class", "exit_codes", "oom_killed", "signals",
                "patterns", "window_lines", "match_all"});
  classifier_rule rule;
  rule.id =
    r.identifier(r.required(obj, path, "id"), child(path, "id"), "a rule id");
  rule.cls =
    class_value(r, r.required(obj, path, "class"), child(path, "class"));
  if (const auto* x = obj.if_contains("exit_codes")) {
    auto ptr = child(path, "exit_codes");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.exit_codes.push_back(r.int_value(arr[i], child(ptr, i), 0, 255));
  }
  if (const auto* x = obj.if_contains("oom_killed"))
    rule.oom_killed = r.boolean(*x, child(path, "oom_killed"));
  if (const auto* x = obj.if_contains("signals")) {
    auto ptr = child(path, "signals");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.signals.push_back(r.int_value(arr[i], child(ptr, i), 1, 64));
  }
  if (const auto* x = obj.if_contains("window_lines"))
    rule.window_lines = static_cast<std::size_t>(
      r.integer(*x, child(path, "window_lines"), 0, 1'000'000));
  if (const auto* x = obj.if_contains("match_all"))
    rule.match_all = r.boolean(*x, child(path, "match_all"));
  if (const auto* x = obj.if_contains("patterns")) {
    auto ptr = child(path, "patterns");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.patterns.push_back(r.nonempty_string(arr[i], child(ptr, i)));
  }
  if (rule.exit_codes.empty() && !rule.oom_killed && rule.signals.empty() &&
      rule.patterns.empty())
    r.fail(path, "a rule needs at least one of \"exit_codes\", "
                 "\"oom_killed\", \"signals\", \"patterns\"");
  return rule;
}

std::vector<classifier_rule> read_rules(const reader& r, const json::value& v,
                                        const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path, {"rules"});
  auto ptr = child(path, "rules");
  const auto& arr = r.array(r.required(obj, path, "rules"), ptr);
  std::vector<classifier_rule> rules;
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    auto rule = read_rule(r, arr[i], child(ptr, i));
    auto [it, added] = seen.emplace(rule.id, i);
    if (!added)
      r.fail(child(child(ptr, i), "id"), "duplicate rule id " + quote(rule.id) +
                                           " (first at " +
                                           child(ptr, it->second) + ")");
    rules.push_back(std::move(rule));
  }
  // The classifier compiles the patterns exactly as it will use them; its
  // error path is relative to the rule array.
  if (auto compiled = classifier::make(rules); !compiled)
    r.fail(ptr + compiled.error().path, compiled.error().what);
  return rules;
}

// -- agents -------------------------------------------------------------------

agent_spec read_agent(const reader& r, const json::value& v,
                      const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"agent_id", "agent_cli", "cli_flags", "config_dir",
                "prompt_as_argument", "profile", "env_passthrough",
                "idle_timeout_s"});
  agent_spec agent;
  agent.agent_id = r.identifier(r.required(obj, path, "agent_id"),
                                child(path, "agent_id"), "an agent id");
  // An agent may name a profile (agent_profile.hpp) instead of its command.
  const agent_profile* profile = nullptr;
  if (const auto* x = obj.if_contains("profile")) {
    auto name = r.nonempty_string(*x, child(path, "profile"));
    profile = find_agent_profile(name);
    if (profile == nullptr)
      r.fail(child(path, "profile"),
             "unknown agent profile " + quote(name) +
               " (known: claude, codex, gemini, qwen, generic)");
  }
  if (profile == nullptr || obj.contains("agent_cli"))
    agent.agent_cli = r.nonempty_string(r.required(obj, path, "agent_cli"),
                                        child(path, "agent_cli"));
  if (agent.agent_cli.find('\0') != std::string::npos)
    r.fail(child(path, "agent_cli"), "expected a command without NUL bytes");
  if (const auto* x = obj.if_contains("cli_flags")) {
    auto ptr = child(path, "cli_flags");
    agent.cli_flags = r.string(*x, ptr);
    auto args = shlex_split(agent.cli_flags);
    if (!args)
      r.fail(ptr, "agent " + quote(agent.agent_id) + ": " + args.error().what);
    for (const auto& arg : *args)
      if (arg.find('\0') != std::string::npos)
        r.fail(ptr, "agent " + quote(agent.agent_id) +
                      ": arguments cannot contain NUL bytes");
    agent.args = std::move(*args);
  }
  if (const auto* x = obj.if_contains("config_dir")) {
    auto ptr = child(path, "config_dir");
    agent.config_dir = expand_home(r, r.string(*x, ptr), ptr);
  }
  if (const auto* x = obj.if_contains("prompt_as_argument"))
    agent.prompt_as_argument = r.boolean(*x, child(path, "prompt_as_argument"));
  if (const auto* x = obj.if_contains("env_passthrough")) {
    auto ptr = child(path, "env_passthrough");
    const auto& names = r.array(*x, ptr);
    if (names.size() > max_env_passthrough)
      r.fail(ptr, "at most " + std::to_string(max_env_passthrough) + " names");
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto name = r.string(names[i], child(ptr, i));
      if (!valid_env_name(name))
        r.fail(child(ptr, i), "expected an environment variable name "
                              "([A-Za-z_][A-Za-z0-9_]*), got " +
                                quote(name));
      agent.env_passthrough.push_back(std::move(name));
    }
  }
  if (const auto* x = obj.if_contains("idle_timeout_s"))
    agent.idle_timeout_s =
      r.number(*x, child(path, "idle_timeout_s"), 0, false, max_idle_timeout_s);
  if (profile != nullptr)
    apply_agent_profile(agent, *profile, obj.contains("idle_timeout_s"),
                        obj.contains("prompt_as_argument"));
  return agent;
}

selection_mode read_selection_mode(const reader& r, const json::value& v,
                                   const std::string& path) {
  auto str = r.string(v, path);
  if (str == "fallback")
    return selection_mode::fallback;
  if (str == "round-robin")
    return selection_mode::round_robin;
  r.fail(path,
         "expected one of \"fallback\", \"round-robin\", got " + quote(str));
}

/// Reads `agents`, `agent_fallbacks` and `selection_mode` of `obj` (the keys
/// were checked by the caller). References to unknown agents are kept: the
/// chain builder reports them as warnings (SPEC §6).
agent_selection read_selection(const reader& r, const json::object& obj,
                               const std::string& path) {
  agent_selection sel;
  if (const auto* x = obj.if_contains("agents")) {
    auto ptr = child(path, "agents");
    const auto& arr = r.array(*x, ptr);
    std::map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto agent = read_agent(r, arr[i], child(ptr, i));
      auto [it, added] = seen.emplace(agent.agent_id, i);
      if (!added)
        r.fail(child(child(ptr, i), "agent_id"),
               "duplicate agent_id " + quote(agent.agent_id) + " (first at " +
                 child(ptr, it->second) + ")");
      sel.agents.push_back(std::move(agent));
    }
  }
  if (const auto* x = obj.if_contains("agent_fallbacks")) {
    auto ptr = child(path, "agent_fallbacks");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string key{kv.key().data(), kv.key().size()};
      auto target = r.nonempty_string(kv.value(), child(ptr, key));
      sel.agent_fallbacks.emplace(std::move(key), std::move(target));
    }
  }
  if (const auto* x = obj.if_contains("selection_mode"))
    sel.mode = read_selection_mode(r, *x, child(path, "selection_mode"));
  return sel;
}

// -- environments, node, tasks ------------------------------------------------

environment_config read_environment(const reader& r, const json::value& v,
                                    std::string name,
                                    const supervisor_config& base) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"agents", "agent_fallbacks", "selection_mode", "supervisor",
                "classifier"});
  environment_config env;
  env.name = std::move(name);
  env.selection = read_selection(r, obj, path);
  if (const auto* x = obj.if_contains("supervisor")) {
    // Validated now, over the settings it will be merged onto, so that a bad
    // value is reported at load time; kept as written for merging per task.
    auto probe = base;
    read_supervisor(r, *x, child(path, "supervisor"), probe);
    env.supervisor_overrides = x->get_object();
  }
  if (const auto* x = obj.if_contains("classifier"))
    env.classifier_rules = read_rules(r, *x, child(path, "classifier"));
  return env;
}

node_config read_node(const reader& r, const json::value& v) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"max_concurrent", "circuit_breaker", "retry_budget",
                "default_agent", "default_runtime"});
  node_config node;
  if (const auto* x = obj.if_contains("max_concurrent"))
    node.max_concurrent = r.int_value(*x, child(path, "max_concurrent"), 1);
  if (const auto* x = obj.if_contains("circuit_breaker")) {
    auto ptr = child(path, "circuit_breaker");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr,
                 {"max_failures", "reset_timeout_s", "stale_after_s"});
    if (const auto* y = sub.if_contains("max_failures"))
      node.breaker.max_failures =
        r.int_value(*y, child(ptr, "max_failures"), 1);
    if (const auto* y = sub.if_contains("reset_timeout_s"))
      node.breaker.reset_timeout_s =
        r.seconds(*y, child(ptr, "reset_timeout_s"));
    if (const auto* y = sub.if_contains("stale_after_s"))
      node.breaker.stale_after_s =
        r.seconds(*y, child(ptr, "stale_after_s"), true);
  }
  if (const auto* x = obj.if_contains("retry_budget")) {
    auto ptr = child(path, "retry_budget");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr, {"capacity", "refill_per_s"});
    if (const auto* y = sub.if_contains("capacity")) {
      if (y->is_null())
        node.retry_budget_capacity.reset();
      else
        node.retry_budget_capacity =
          r.number(*y, child(ptr, "capacity"), 0.0, false, 1e9);
    }
    if (const auto* y = sub.if_contains("refill_per_s"))
      node.retry_budget_refill_per_s =
        r.number(*y, child(ptr, "refill_per_s"), 0.0, false, 1e9);
  }
  if (const auto* x = obj.if_contains("default_agent"))
    node.default_agent = read_agent(r, *x, child(path, "default_agent"));
  if (const auto* x = obj.if_contains("default_runtime"))
    node.default_runtime = r.string(*x, child(path, "default_runtime"));
  if (node.default_runtime != "process" && node.default_runtime != "docker")
    r.fail(child(path, "default_runtime"),
           "expected one of \"process\", \"docker\", got " +
             quote(node.default_runtime));
  return node;
}

/// An absolute path (after `~` expansion).
std::string absolute_path(const reader& r, const json::value& v,
                          const std::string& path) {
  auto str = expand_home(r, r.nonempty_string(v, path), path);
  if (str[0] != '/')
    r.fail(path, "expected an absolute path, got " + quote(str));
  if (str.find('\0') != std::string::npos)
    r.fail(path, "expected a path without NUL bytes");
  return str;
}

std::string known_environments(const config_set& cfg) {
  if (cfg.environments.empty())
    return "no environments are configured";
  std::string out = "known: ";
  bool first = true;
  for (const auto& kv : cfg.environments) {
    if (!first)
      out += ", ";
    first = false;
    out += kv.first;
  }
  return out;
}

task_spec read_task(const reader& r, const json::value& v,
                    const config_set& cfg) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"id", "prompt", "environment", "agent_selection", "supervisor",
                "runtime", "image", "env", "memory_limit_mb", "classifier",
                "mounts", "workdir"});
  task_spec task;
  if (const auto* x = obj.if_contains("id"))
    task.id = r.identifier(*x, "/id", "a task id");
  task.prompt = r.nonempty_string(r.required(obj, path, "prompt"), "/prompt");
  const environment_config* env = nullptr;
  if (const auto* x = obj.if_contains("environment")) {
    auto name = r.nonempty_string(*x, "/environment");
    auto it = cfg.environments.find(name);
    if (it == cfg.environments.end())
      r.fail("/environment", "unknown environment " + quote(name) + " (" +
                               known_environments(cfg) + ")");
    env = &it->second;
  } else if (auto it = cfg.environments.find("default");
             it != cfg.environments.end()) {
    env = &it->second;
  }
  if (env != nullptr)
    task.environment = env->name;
  // Supervisor settings: global < environment < task.
  task.supervisor = cfg.supervisor;
  if (env != nullptr && env->supervisor_overrides) {
    reader env_reader{"environment " + env->name};
    read_supervisor(env_reader, json::value(*env->supervisor_overrides),
                    "/supervisor", task.supervisor);
  }
  if (const auto* x = obj.if_contains("supervisor"))
    read_supervisor(r, *x, "/supervisor", task.supervisor);
  if (const auto* x = obj.if_contains("agent_selection")) {
    const auto& sub = r.object(*x, "/agent_selection");
    r.check_keys(sub, "/agent_selection",
                 {"agents", "agent_fallbacks", "selection_mode"});
    task.selection = read_selection(r, sub, "/agent_selection");
  } else if (env != nullptr && !env->selection.agents.empty()) {
    task.selection = env->selection;
  }
  if (const auto* x = obj.if_contains("classifier"))
    task.classifier_rules = read_rules(r, *x, "/classifier");
  else if (env != nullptr)
    task.classifier_rules = env->classifier_rules;
  if (const auto* x = obj.if_contains("runtime")) {
    task.runtime = r.string(*x, "/runtime");
    if (task.runtime != "process" && task.runtime != "docker")
      r.fail("/runtime", "expected one of \"process\", \"docker\", got " +
                           quote(task.runtime));
  }
  if (const auto* x = obj.if_contains("image"))
    task.image = r.nonempty_string(*x, "/image");
  if (const auto* x = obj.if_contains("env")) {
    for (const auto& kv : r.object(*x, "/env")) {
      std::string key{kv.key().data(), kv.key().size()};
      auto ptr = child("/env", key);
      if (key.empty() || key.find('=') != std::string::npos ||
          key.find('\0') != std::string::npos)
        r.fail(ptr, "invalid environment variable name " + quote(key) +
                      " (must be non-empty, without '=' or NUL)");
      auto value = r.string(kv.value(), ptr);
      if (value.find('\0') != std::string::npos)
        r.fail(ptr, "expected a string without NUL bytes");
      task.env.emplace(std::move(key), std::move(value));
    }
  }
  if (const auto* x = obj.if_contains("memory_limit_mb"))
    task.memory_limit_mb = static_cast<std::uint64_t>(
      r.integer(*x, "/memory_limit_mb", 1, max_memory_limit_mb));
  if (const auto* x = obj.if_contains("mounts")) {
    const auto& arr = r.array(*x, "/mounts");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto ptr = child("/mounts", i);
      const auto& sub = r.object(arr[i], ptr);
      r.check_keys(sub, ptr, {"host_path", "container_path", "read_only"});
      mount_spec m;
      m.host_path = absolute_path(r, r.required(sub, ptr, "host_path"),
                                  child(ptr, "host_path"));
      m.container_path =
        absolute_path(r, r.required(sub, ptr, "container_path"),
                      child(ptr, "container_path"));
      if (const auto* y = sub.if_contains("read_only"))
        m.read_only = r.boolean(*y, child(ptr, "read_only"));
      task.mounts.push_back(std::move(m));
    }
  }
  if (const auto* x = obj.if_contains("workdir"))
    task.workdir = absolute_path(r, *x, "/workdir");
  return task;
}

/// Runs `fn` and turns a `parse_failure` into an error value.
template<class F>
auto guarded(F&& fn) -> expected<decltype(fn())> {
  try {
    return fn();
  } catch (parse_failure& failure) {
    return std::move(failure.err);
  }
}

std::string join_path(const std::string& dir, const std::string& name) {
  return (fs::path{dir} / name).string();
}

} // namespace

void resolve_agent_paths(std::vector<agent_spec>& agents,
                         const std::string& file) {
  auto dir = fs::path{file}.parent_path();
  for (auto& agent : agents) {
    const auto& cli = agent.agent_cli;
    if (cli.empty() || cli[0] == '/' || cli.find('/') == std::string::npos)
      continue;
    std::error_code ec;
    auto full = fs::absolute(dir / cli, ec);
    if (!ec)
      agent.agent_cli = full.lexically_normal().string();
  }
}

config_set builtin_config() {
  config_set cfg;
  cfg.classifier_rules = default_classifier_rules();
  return cfg;
}

expected<supervisor_config>
parse_supervisor_config(const json::value& doc, std::string_view where,
                        const supervisor_config& base) {
  return guarded([&] {
    reader r{where};
    auto cfg = base;
    read_supervisor(r, doc, "", cfg);
    return cfg;
  });
}

expected<std::vector<classifier_rule>>
parse_classifier_rules(const json::value& doc, std::string_view where) {
  return guarded([&] { return read_rules(reader{where}, doc, ""); });
}

expected<environment_config> parse_environment(const json::value& doc,
                                               std::string_view where,
                                               std::string name) {
  return guarded([&] {
    reader r{where};
    if (!valid_identifier(name))
      r.fail("", "invalid environment name " + quote(name) +
                   " (expected 1 to 64 characters from [A-Za-z0-9_.-])");
    return read_environment(r, doc, std::move(name), supervisor_config{});
  });
}

expected<node_config> parse_node_config(const json::value& doc,
                                        std::string_view where) {
  return guarded([&] { return read_node(reader{where}, doc); });
}

expected<task_spec> parse_task(const json::value& doc, std::string_view where,
                               const config_set& cfg) {
  return guarded([&] { return read_task(reader{where}, doc, cfg); });
}

expected<json::value> parse_json_text(std::string_view text,
                                      std::string_view where) {
  json::parse_options opts;
  opts.max_depth = max_json_depth;
  json::stream_parser parser{json::storage_ptr{}, opts};
  boost::system::error_code ec;
  auto consumed = parser.write(text.data(), text.size(), ec);
  if (!ec)
    parser.finish(ec);
  if (ec) {
    // The parser stops at the offending byte; count lines up to it.
    auto offset = std::min(consumed, text.size());
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return error{std::string{where}, std::string{},
                 "invalid JSON at line " + std::to_string(line) + ", column " +
                   std::to_string(offset - line_start + 1) + ": " +
                   ec.message()};
  }
  return parser.release();
}

expected<json::value> read_json_file(const std::string& path) {
  std::error_code fs_ec;
  if (fs::is_directory(path, fs_ec))
    return error{path, "", "is a directory, expected a JSON file"};
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{
    std::fopen(path.c_str(), "rb"), &std::fclose};
  if (!file)
    return error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  std::string text;
  char buf[65536];
  for (;;) {
    auto n = std::fread(buf, 1, sizeof(buf), file.get());
    if (n > 0) {
      if (text.size() + n > max_file_bytes)
        return error{path, "",
                     "file is larger than " + std::to_string(max_file_bytes) +
                       " bytes"};
      text.append(buf, n);
    }
    if (n < sizeof(buf)) {
      if (std::ferror(file.get()))
        return error{path, "",
                     std::string{"cannot read: "} + std::strerror(errno)};
      break;
    }
  }
  return parse_json_text(text, path);
}

namespace {

/// Reads `dir/name` when it exists, else nullopt; a file that exists but
/// cannot be read or parsed is an error.
expected<std::optional<json::value>> read_optional(const std::string& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found)
    return std::optional<json::value>{};
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  return std::optional<json::value>{std::move(*doc)};
}

} // namespace

expected<config_set> load_config_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error{dir, "", "not a directory"};
  auto cfg = builtin_config();
  {
    auto path = join_path(dir, "supervisor.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_supervisor_config(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.supervisor = std::move(*parsed);
    }
  }
  {
    auto path = join_path(dir, "classifier.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_classifier_rules(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.classifier_rules = std::move(*parsed);
    }
  }
  {
    auto path = join_path(dir, "node.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_node_config(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.node = std::move(*parsed);
      std::vector<agent_spec> agents{std::move(cfg.node.default_agent)};
      resolve_agent_paths(agents, path);
      cfg.node.default_agent = std::move(agents.front());
    }
  }
  auto env_dir = join_path(dir, "environments");
  if (fs::is_directory(env_dir, ec)) {
    std::vector<fs::path> files;
    for (fs::directory_iterator it{env_dir, ec}, end; !ec && it != end;
         it.increment(ec))
      if (it->path().extension() == ".json")
        files.push_back(it->path());
    if (ec)
      return error{env_dir, "", "cannot list: " + ec.message()};
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      auto path = file.string();
      auto doc = read_json_file(path);
      if (!doc)
        return doc.error();
      auto name = file.stem().string();
      auto parsed = guarded([&] {
        reader r{path};
        if (!valid_identifier(name))
          r.fail("", "invalid environment name " + quote(name) +
                       " (the file name must be 1 to 64 characters from "
                       "[A-Za-z0-9_.-] plus \".json\")");
        return read_environment(r, *doc, name, cfg.supervisor);
      });
      if (!parsed)
        return parsed.error();
      resolve_agent_paths(parsed->selection.agents, path);
      cfg.environments.emplace(std::move(name), std::move(*parsed));
    }
  }
  return cfg;
}

expected<task_spec> load_task_file(const std::string& path,
                                   const config_set& cfg) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  auto task = parse_task(*doc, path, cfg);
  // Only the task's own agents are relative to the task file; the
  // environment's were resolved against theirs at load.
  if (task && task->selection && doc->is_object() &&
      doc->get_object().contains("agent_selection"))
    resolve_agent_paths(task->selection->agents, path);
  return task;
}

namespace {

/// The checks `read_task` makes on JSON, made on a task that arrived already
/// built; each value goes through the same reader so the errors read alike.
void check_text(const reader& r, const std::string& str,
                const std::string& path, bool nonempty) {
  if (nonempty && str.empty())
    r.fail(path, "expected a non-empty string");
  if (str.size() > max_file_bytes)
    r.fail(path,
           "expected at most " + std::to_string(max_file_bytes) + " bytes");
  if (str.find('\0') != std::string::npos)
    r.fail(path, "expected a string without NUL bytes");
}

void check_id(const reader& r, const std::string& str, const std::string& path,
              std::string_view what) {
  r.identifier(json::value(json::string_view{str}), path, what);
}

void check_seconds(const reader& r, double x, const std::string& path,
                   bool positive = false) {
  r.seconds(json::value(x), path, positive);
}

void check_int(const reader& r, int x, const std::string& path, int lo) {
  r.int_value(json::value(std::int64_t{x}), path, lo);
}

void check_absolute(const reader& r, const std::string& str,
                    const std::string& path) {
  check_text(r, str, path, true);
  if (str[0] != '/')
    r.fail(path, "expected an absolute path, got " + quote(str));
}

void check_supervisor(const reader& r, const supervisor_config& cfg,
                      const std::string& path) {
  check_int(r, cfg.max_retries_per_agent, child(path, "max_retries_per_agent"),
            0);
  check_seconds(r, cfg.backoff_base_seconds,
                child(path, "backoff_base_seconds"));
  check_seconds(r, cfg.rate_limit_backoff_base,
                child(path, "rate_limit_backoff_base"));
  check_int(r, cfg.max_total_attempts, child(path, "max_total_attempts"), 1);
  check_int(r, cfg.max_crash_restarts, child(path, "max_crash_restarts"), 0);
  auto ptr = child(path, "intensity");
  check_int(r, cfg.intensity.max_restarts, child(ptr, "max_restarts"), 0);
  check_seconds(r, cfg.intensity.period_s, child(ptr, "period_s"), true);
  check_seconds(r, cfg.intensity.reset_after_s, child(ptr, "reset_after_s"));
  for (const auto& [cls, spec] : cfg.backoff) {
    auto bp = child(child(path, "backoff"), to_string(cls));
    constexpr std::size_t max_entries = 1000;
    if (spec.table_s.size() > max_entries)
      r.fail(child(bp, "table_s"),
             "expected at most " + std::to_string(max_entries) + " entries");
    for (std::size_t i = 0; i < spec.table_s.size(); ++i)
      check_seconds(r, spec.table_s[i], child(child(bp, "table_s"), i));
    check_seconds(r, spec.initial_s, child(bp, "initial_s"));
    r.number(json::value(spec.multiplier), child(bp, "multiplier"), 1.0, false,
             100.0);
    check_seconds(r, spec.max_s, child(bp, "max_s"));
    if (spec.kind == backoff_spec::kind_t::table && spec.table_s.empty())
      r.fail(bp, "a \"table\" schedule needs a non-empty \"table_s\"");
    if (spec.kind == backoff_spec::kind_t::exponential &&
        spec.max_s < spec.initial_s)
      r.fail(bp, "\"max_s\" must be at least \"initial_s\" for an "
                 "\"exponential\" schedule");
  }
  if (cfg.deadline_s)
    check_seconds(r, *cfg.deadline_s, child(path, "deadline_s"), true);
  check_seconds(r, cfg.stop_grace_s, child(path, "stop_grace_s"));
}

void check_agent(const reader& r, const agent_spec& agent,
                 const std::string& path) {
  check_id(r, agent.agent_id, child(path, "agent_id"), "an agent id");
  check_text(r, agent.agent_cli, child(path, "agent_cli"), true);
  check_text(r, agent.cli_flags, child(path, "cli_flags"), false);
  for (const auto& arg : agent.args)
    check_text(r, arg, child(path, "cli_flags"), false);
  check_text(r, agent.config_dir, child(path, "config_dir"), false);
  for (std::size_t i = 0; i < agent.env_passthrough.size(); ++i)
    if (!valid_env_name(agent.env_passthrough[i]))
      r.fail(child(child(path, "env_passthrough"), i),
             "expected an environment variable name");
  if (agent.env_passthrough.size() > max_env_passthrough)
    r.fail(child(path, "env_passthrough"), "too many names");
  r.number(json::value(agent.idle_timeout_s), child(path, "idle_timeout_s"), 0,
           false, max_idle_timeout_s);
}

} // namespace

expected<bool> validate_task(const task_spec& task, std::string_view where) {
  return guarded([&] {
    reader r{where};
    if (!task.id.empty())
      check_id(r, task.id, "/id", "a task id");
    check_text(r, task.prompt, "/prompt", true);
    if (!task.environment.empty())
      check_id(r, task.environment, "/environment", "an environment name");
    if (task.selection) {
      const std::string sp = "/agent_selection";
      std::map<std::string_view, std::size_t> seen;
      for (std::size_t i = 0; i < task.selection->agents.size(); ++i) {
        const auto& agent = task.selection->agents[i];
        auto ptr = child(child(sp, "agents"), i);
        check_agent(r, agent, ptr);
        auto [it, added] = seen.emplace(agent.agent_id, i);
        if (!added)
          r.fail(child(ptr, "agent_id"),
                 "duplicate agent_id " + quote(agent.agent_id) + " (first at " +
                   child(child(sp, "agents"), it->second) + ")");
      }
      for (const auto& [from, to] : task.selection->agent_fallbacks) {
        auto ptr = child(child(sp, "agent_fallbacks"), from);
        check_text(r, from, ptr, true);
        check_text(r, to, ptr, true);
      }
    }
    check_supervisor(r, task.supervisor, "/supervisor");
    if (task.classifier_rules) {
      auto compiled = classifier::make(*task.classifier_rules);
      if (!compiled)
        r.fail("/classifier", compiled.error().to_string());
    }
    if (!task.runtime.empty() && task.runtime != "process" &&
        task.runtime != "docker")
      r.fail("/runtime", "expected one of \"process\", \"docker\", got " +
                           quote(task.runtime));
    check_text(r, task.image, "/image", false);
    for (const auto& [key, value] : task.env) {
      auto ptr = child("/env", key);
      if (key.empty() || key.find('=') != std::string::npos ||
          key.find('\0') != std::string::npos)
        r.fail(ptr, "invalid environment variable name " + quote(key) +
                      " (must be non-empty, without '=' or NUL)");
      check_text(r, value, ptr, false);
    }
    if (task.memory_limit_mb &&
        (*task.memory_limit_mb < 1 ||
         *task.memory_limit_mb >
           static_cast<std::uint64_t>(max_memory_limit_mb)))
      r.fail("/memory_limit_mb", "expected an integer from 1 to " +
                                   std::to_string(max_memory_limit_mb));
    for (std::size_t i = 0; i < task.mounts.size(); ++i) {
      auto ptr = child("/mounts", i);
      check_absolute(r, task.mounts[i].host_path, child(ptr, "host_path"));
      check_absolute(r, task.mounts[i].container_path,
                     child(ptr, "container_path"));
    }
    if (!task.workdir.empty())
      check_absolute(r, task.workdir, "/workdir");
    return true;
  });
}

} // namespace tasksup
