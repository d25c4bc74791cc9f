#include "tasksup/supervisor/agent_profile.hpp"

#include "tasksup/supervisor/config.hpp"

#include "../temp_dir.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

boost::json::value doc(std::string_view text) {
  return boost::json::parse(boost::json::string_view{text.data(), text.size()});
}

expected<agent_profile> profile(std::string_view text) {
  return parse_agent_profile(doc(text), "p", "p.json");
}

void check_error(const expected<agent_profile>& res, std::string_view path,
                 std::string_view fragment) {
  REQUIRE_FALSE(res);
  CHECK(res.error().where == "p.json");
  CHECK(res.error().path == path);
  CHECK_THAT(res.error().what, Catch::Contains(std::string{fragment}));
}

expected<task_spec> task(std::string_view text) {
  return parse_task(doc(text), "task.json", builtin_config());
}

} // namespace

TEST_CASE("config/profiles/*.json are the built-in profiles") {
  namespace fs = std::filesystem;
  const std::string dir = TASKSUP_SOURCE_DIR "/config/profiles";
  std::size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json")
      continue;
    auto name = entry.path().stem().string();
    INFO(name);
    auto text = read_json_file(entry.path().string());
    REQUIRE(text);
    auto p = parse_agent_profile(*text, name, entry.path().string());
    INFO((p ? "" : p.error().to_string()));
    REQUIRE(p);
    const auto* builtin = find_agent_profile(name);
    REQUIRE(builtin != nullptr);
    CHECK(builtin->agent_cli == p->agent_cli);
    CHECK(builtin->args == p->args);
    CHECK(builtin->prompt_flag == p->prompt_flag);
    CHECK(builtin->prompt_as_argument == p->prompt_as_argument);
    CHECK(builtin->env_passthrough == p->env_passthrough);
    CHECK(builtin->output == p->output);
    CHECK(builtin->idle_timeout_s == p->idle_timeout_s);
    CHECK(builtin->provider == p->provider);
    CHECK(builtin->idle_noise == p->idle_noise);
    ++seen;
  }
  CHECK(seen == builtin_agent_profiles().size());
  for (auto name : {"claude", "codex", "gemini", "qwen", "generic"})
    CHECK(find_agent_profile(name) != nullptr);
}

TEST_CASE("the shipped profiles use flags the current CLIs accept") {
  // What each pinned CLI needs to run unattended and machine-readably (see
  // tests/fixtures/agent-logs/: codex rejects --full-auto and refuses a
  // non-git directory; claude's stream-json requires --verbose).
  auto has = [](const agent_profile& p, std::string_view arg) {
    return std::find(p.args.begin(), p.args.end(), arg) != p.args.end();
  };
  const auto& claude = *find_agent_profile("claude");
  CHECK(has(claude, "-p"));
  CHECK(has(claude, "stream-json"));
  CHECK(has(claude, "--verbose"));
  CHECK(claude.output == output_format::claude_stream_json);
  const auto& codex = *find_agent_profile("codex");
  CHECK(codex.args.front() == "exec");
  CHECK(has(codex, "--json"));
  CHECK(has(codex, "--skip-git-repo-check"));
  CHECK_FALSE(has(codex, "--full-auto"));
  CHECK(codex.output == output_format::codex_jsonl);
  const auto& gemini = *find_agent_profile("gemini");
  CHECK(gemini.prompt_flag == "-p"); // -p takes the prompt as its value
  CHECK(has(gemini, "--skip-trust"));
  CHECK(gemini.output == output_format::gemini_json);
  for (const auto* p : {&claude, &codex, &gemini}) {
    CHECK_FALSE(p->provider.empty());
    CHECK(p->idle_timeout_s > 0);
  }
}

TEST_CASE("bad profiles are rejected naming file and JSON pointer") {
  check_error(profile(R"({})"), "", "agent_cli");
  check_error(profile(R"({"agent_cli": ""})"), "/agent_cli", "non-empty");
  check_error(profile(R"({"agent_cli": "x", "colour": 1})"), "/colour",
              "unknown key");
  check_error(profile(R"({"agent_cli": "x", "cli_flags": "-p 'open"})"),
              "/cli_flags", "quote");
  check_error(profile(R"({"agent_cli": "x", "env_passthrough": "KEY"})"),
              "/env_passthrough", "array");
  check_error(
    profile(R"({"agent_cli": "x", "env_passthrough": ["OK", "NOT-OK"]})"),
    "/env_passthrough/1", "environment variable name");
  check_error(profile(R"({"agent_cli": "x", "env_passthrough": ["A", "A"]})"),
              "/env_passthrough/1", "duplicate");
  check_error(profile(R"({"agent_cli": "x", "env_passthrough": ["*"]})"),
              "/env_passthrough/0", "environment variable name");
  check_error(profile(R"({"agent_cli": "x", "output_format": "json"})"),
              "/output_format", "claude-stream-json");
  check_error(profile(R"({"agent_cli": "x", "idle_timeout_s": -1})"),
              "/idle_timeout_s", "seconds");
  check_error(profile(R"({"agent_cli": "x", "idle_timeout_s": 1e12})"),
              "/idle_timeout_s", "seconds");
  check_error(profile(R"({"agent_cli": "x", "prompt_as_argument": 1})"),
              "/prompt_as_argument", "true or false");
  check_error(profile(R"([])"), "", "object");
  check_error(profile(R"({"agent_cli": "x", "prompt_flag": 1})"),
              "/prompt_flag", "flag");
  check_error(profile(R"({"agent_cli": "x", "idle_noise": "Reconnecting"})"),
              "/idle_noise", "array");
  check_error(profile(R"({"agent_cli": "x", "idle_noise": ["ok", 3]})"),
              "/idle_noise/1", "pattern");
  check_error(profile(R"({"agent_cli": "x", "idle_noise": ["ok", ""]})"),
              "/idle_noise/1", "pattern");
  check_error(profile(R"({"agent_cli": "x", "idle_noise": ["(unclosed"]})"),
              "/idle_noise/0", "not a valid pattern");
  std::string many = R"({"agent_cli": "x", "idle_noise": [)";
  for (int i = 0; i < 17; ++i)
    many += (i ? ", " : "") + std::string{"\"p\""};
  check_error(profile(many + "]}"), "/idle_noise", "at most 16");
}

TEST_CASE("codex's idle_noise matches its offline loop and nothing it prints "
          "when it works") {
  const auto& codex = *find_agent_profile("codex");
  idle_noise_filter noise{codex.idle_noise};
  REQUIRE(noise.active());
  auto lines = [](const std::string& name) {
    std::ifstream in{TASKSUP_SOURCE_DIR "/tests/fixtures/agent-logs/" + name};
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    REQUIRE_FALSE(out.empty());
    return out;
  };
  std::size_t loops = 0;
  for (const auto& line : lines("codex-refused.log"))
    if (line.find("Reconnecting") != std::string::npos) {
      CHECK(noise.is_noise(line));
      ++loops;
    }
  CHECK(loops >= 4);
  CHECK(noise.is_noise(
    R"j({"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"})j"));
  CHECK(noise.is_noise("Reconnecting... 2/5"));
  for (auto name : {"codex-ok-json.log", "codex-ok.log", "codex-rate-json.log",
                    "codex-auth-json.log"})
    for (const auto& line : lines(name)) {
      INFO(name << ": " << line);
      CHECK_FALSE(noise.is_noise(line));
    }
}

TEST_CASE("environment variable names") {
  CHECK(valid_env_name("ANTHROPIC_API_KEY"));
  CHECK(valid_env_name("_x1"));
  CHECK_FALSE(valid_env_name(""));
  CHECK_FALSE(valid_env_name("1ABC"));
  CHECK_FALSE(valid_env_name("A=B"));
  CHECK_FALSE(valid_env_name("A B"));
  CHECK_FALSE(valid_env_name(std::string(129, 'A')));
}

TEST_CASE("an agent naming a profile gets its command, flags, env names, "
          "parser and idle timeout") {
  auto t = task(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "c", "profile": "claude", "cli_flags": "--model opus",
     "env_passthrough": ["MY_PROXY", "ANTHROPIC_API_KEY"]},
    {"agent_id": "x", "profile": "codex", "agent_cli": "/opt/codex",
     "idle_timeout_s": 30, "prompt_as_argument": false}]}})");
  INFO((t ? "" : t.error().to_string()));
  REQUIRE(t);
  const auto& agents = t->selection->agents;
  const auto& c = agents[0];
  CHECK(c.profile == "claude");
  CHECK(c.agent_cli == "claude");
  REQUIRE(c.args.size() >= 3);
  CHECK(c.args.front() == "-p");
  CHECK(c.args[c.args.size() - 2] == "--model");
  CHECK(c.args.back() == "opus");
  CHECK(c.cli_flags == "--model opus");
  CHECK(c.output == output_format::claude_stream_json);
  CHECK(c.provider == "anthropic");
  CHECK(c.idle_timeout_s == 600);
  // The profile's names first, then the agent's, each once.
  CHECK(c.env_passthrough.front() == "ANTHROPIC_API_KEY");
  CHECK(c.env_passthrough.back() == "MY_PROXY");
  CHECK(std::count(c.env_passthrough.begin(), c.env_passthrough.end(),
                   "ANTHROPIC_API_KEY") == 1);
  const auto& x = agents[1];
  CHECK(x.agent_cli == "/opt/codex");
  CHECK(x.args.front() == "exec");
  CHECK(x.idle_timeout_s == 30);
  CHECK_FALSE(x.prompt_as_argument);
  CHECK(validate_task(*t, "typed"));
}

TEST_CASE("agent profile errors in a task file name the JSON pointer") {
  auto unknown = task(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a", "profile": "clod"}]}})");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().where == "task.json");
  CHECK(unknown.error().path == "/agent_selection/agents/0/profile");
  CHECK_THAT(unknown.error().what, Catch::Contains("unknown agent profile"));

  auto no_cli = task(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a"}]}})");
  REQUIRE_FALSE(no_cli);
  CHECK(no_cli.error().path == "/agent_selection/agents/0");

  auto bad_env = task(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a", "profile": "gemini", "env_passthrough": ["OK", "$X"]}]}})");
  REQUIRE_FALSE(bad_env);
  CHECK(bad_env.error().path == "/agent_selection/agents/0/env_passthrough/1");

  auto bad_idle = task(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a", "agent_cli": "x", "idle_timeout_s": -5}]}})");
  REQUIRE_FALSE(bad_idle);
  CHECK(bad_idle.error().path == "/agent_selection/agents/0/idle_timeout_s");
}

TEST_CASE("fatal_scope: provider by default, task on request") {
  CHECK(supervisor_config{}.fatal == fatal_scope::provider);
  auto t = task(R"({"prompt": "p", "supervisor": {"fatal_scope": "task"}})");
  REQUIRE(t);
  CHECK(t->settings.fatal == fatal_scope::task);
  auto bad = task(R"({"prompt": "p", "supervisor": {"fatal_scope": "all"}})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().path == "/supervisor/fatal_scope");
  CHECK(parse_fatal_scope(to_string(fatal_scope::task)) == fatal_scope::task);
  CHECK_FALSE(parse_fatal_scope(""));
}

namespace {

/// Writes `text` to `dir/rel`, creating the directories on the way.
void put(const std::string& dir, const std::string& rel,
         const std::string& text) {
  auto path = std::filesystem::path{dir} / rel;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

} // namespace

TEST_CASE("user profiles: an agent names a profile from the config's "
          "profiles directory, in tasks, environments and node.json") {
  tasksup::test::temp_dir dir{"profiles"};
  put(dir.path, "profiles/myagent.json", R"({
    "agent_cli": "./bin/my-agent", "cli_flags": "--quiet --json",
    "prompt_flag": "--task", "env_passthrough": ["MY_AGENT_TOKEN"],
    "idle_timeout_s": 42, "provider": "acme"})");
  put(dir.path, "environments/team.json", R"({"agents": [
    {"agent_id": "m", "profile": "myagent", "cli_flags": "--fast"}]})");
  put(dir.path, "node.json",
      R"({"default_agent": {"agent_id": "d", "profile": "myagent"}})");
  auto cfg = load_config_dir(dir.path);
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg);
  REQUIRE(cfg->profiles.count("myagent") == 1);
  // A relative command in a profile is relative to its directory.
  auto cli = dir.path + "/profiles/bin/my-agent";
  CHECK(cfg->profiles.at("myagent").agent_cli == cli);

  const auto& env_agent = cfg->environments.at("team").selection.agents.at(0);
  CHECK(env_agent.profile == "myagent");
  CHECK(env_agent.agent_cli == cli);
  CHECK(env_agent.args ==
        std::vector<std::string>{"--quiet", "--json", "--fast", "--task"});
  CHECK(env_agent.env_passthrough ==
        std::vector<std::string>{"MY_AGENT_TOKEN"});
  CHECK(env_agent.idle_timeout_s == 42);
  CHECK(env_agent.provider == "acme");
  CHECK(cfg->node.default_agent.agent_cli == cli);

  // A task file (run, validate) and a JSON submit (the node's
  // parse_task_as_written with its profiles) resolve it the same way.
  auto text = R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a", "profile": "myagent"}]}})";
  auto from_file = parse_task(doc(text), "task.json", *cfg);
  INFO((from_file ? "" : from_file.error().to_string()));
  REQUIRE(from_file);
  auto written = parse_task_as_written(doc(text), "submitted", cfg->profiles);
  REQUIRE(written);
  auto submitted = resolve_task(std::move(*written), *cfg, "submitted");
  REQUIRE(submitted);
  CHECK(from_file->selection->agents == submitted->selection->agents);
  CHECK(from_file->selection->agents.at(0).agent_cli == cli);

  // Without the config, the name is unknown: the error names the file, the
  // field, and the profiles that do exist.
  auto unknown = task(text);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().where == "task.json");
  CHECK(unknown.error().path == "/agent_selection/agents/0/profile");
  CHECK_THAT(unknown.error().what,
             Catch::Contains("unknown agent profile \"myagent\"") &&
               Catch::Contains("claude, codex, gemini, generic, qwen"));
  // With it, an unknown name lists the user's profiles too.
  auto other = parse_task(doc(R"({"prompt": "p", "agent_selection":
    {"agents": [{"agent_id": "a", "profile": "nope"}]}})"),
                          "task.json", *cfg);
  REQUIRE_FALSE(other);
  CHECK_THAT(other.error().what, Catch::Contains("myagent"));
}

TEST_CASE("user profiles: a file named after a built-in overrides only the "
          "keys it names") {
  tasksup::test::temp_dir dir{"profiles"};
  put(dir.path, "profiles/codex.json",
      R"({"idle_timeout_s": 120, "env_passthrough": ["OPENAI_API_KEY"]})");
  auto cfg = load_config_dir(dir.path);
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg);
  const auto& builtin = *find_agent_profile("codex");
  const auto* mine = find_agent_profile("codex", cfg->profiles);
  REQUIRE(mine != nullptr);
  CHECK(mine != &builtin);
  CHECK(mine->idle_timeout_s == 120);
  // A list is replaced as a whole, not appended to.
  CHECK(mine->env_passthrough == std::vector<std::string>{"OPENAI_API_KEY"});
  // Everything else is the built-in's.
  CHECK(mine->agent_cli == builtin.agent_cli);
  CHECK(mine->args == builtin.args);
  CHECK(mine->output == builtin.output);
  CHECK(mine->provider == builtin.provider);
  auto t = parse_task(doc(R"({"prompt": "p", "agent_selection": {"agents": [
    {"agent_id": "a", "profile": "codex"}]}})"),
                      "task.json", *cfg);
  REQUIRE(t);
  CHECK(t->selection->agents.at(0).idle_timeout_s == 120);
  // The other built-ins are untouched.
  CHECK(find_agent_profile("claude", cfg->profiles) ==
        find_agent_profile("claude"));
}

TEST_CASE("user profiles: a bad profile file fails the config load naming "
          "the file and the field") {
  struct row {
    const char* file;
    const char* text;
    const char* path;
    const char* fragment;
  };
  for (auto c :
       {row{"new.json", R"({"cli_flags": "-x"})", "", "agent_cli"},
        row{"new.json", R"({"agent_cli": "x", "idle_timeout_s": "5"})",
            "/idle_timeout_s", "seconds"},
        row{"claude.json", R"({"output_format": "yaml"})", "/output_format",
            "claude-stream-json"},
        row{"claude.json", R"({"agent_cli": ""})", "/agent_cli", "non-empty"},
        row{"x.json", R"({"agent_cli": "x", "env_passthrough": ["A-B"]})",
            "/env_passthrough/0", "environment variable name"},
        row{"x.json", R"({"agent_cli": "x", "flags": ""})", "/flags",
            "unknown key"},
        row{"bad name!.json", R"({"agent_cli": "x"})", "",
            "invalid profile name"}}) {
    INFO(c.file << " " << c.text);
    tasksup::test::temp_dir dir{"profiles"};
    put(dir.path, std::string{"profiles/"} + c.file, c.text);
    auto cfg = load_config_dir(dir.path);
    REQUIRE_FALSE(cfg);
    CHECK(cfg.error().where == dir.path + "/profiles/" + c.file);
    CHECK(cfg.error().path == c.path);
    CHECK_THAT(cfg.error().what, Catch::Contains(c.fragment));
  }
  // Not JSON: the file, the line and column.
  tasksup::test::temp_dir dir{"profiles"};
  put(dir.path, "profiles/broken.json", "{\"agent_cli\": \n}");
  auto cfg = load_config_dir(dir.path);
  REQUIRE_FALSE(cfg);
  CHECK(cfg.error().where == dir.path + "/profiles/broken.json");
  CHECK_THAT(cfg.error().what, Catch::Contains("line 2"));
}

TEST_CASE("user profiles: files that are not .json are ignored, no "
          "directory means none") {
  tasksup::test::temp_dir dir{"profiles"};
  auto none = load_profiles_dir(dir.path + "/profiles");
  REQUIRE(none);
  CHECK(none->empty());
  put(dir.path, "profiles/README.md", "not a profile");
  put(dir.path, "profiles/a.json", R"({"agent_cli": "a"})");
  auto some = load_profiles_dir(dir.path + "/profiles");
  REQUIRE(some);
  CHECK(some->size() == 1);
  CHECK(some->at("a").name == "a");
}

TEST_CASE("the README's real-agents example is config/examples/"
          "real-agents.json, and it resolves to the three profiled CLIs") {
  // The README shows the file; a drift between them would teach users a
  // task that nothing checks.
  std::ifstream in{TASKSUP_SOURCE_DIR "/README.md"};
  std::string readme{std::istreambuf_iterator<char>{in},
                     std::istreambuf_iterator<char>{}};
  auto section = readme.find("### Real agents: claude, codex and gemini");
  REQUIRE(section != std::string::npos);
  auto open = readme.find("```json\n", section);
  REQUIRE(open != std::string::npos);
  open += 8;
  auto close = readme.find("```", open);
  REQUIRE(close != std::string::npos);
  auto shown = boost::json::parse(readme.substr(open, close - open));
  auto file =
    read_json_file(TASKSUP_SOURCE_DIR "/config/examples/real-agents.json");
  REQUIRE(file);
  CHECK(shown == *file);

  auto t = parse_task(*file, "real-agents.json", builtin_config());
  INFO((t ? "" : t.error().to_string()));
  REQUIRE(t);
  const auto& agents = t->selection->agents;
  REQUIRE(agents.size() == 3);
  CHECK(agents[0].agent_cli == "claude");
  CHECK(agents[1].agent_cli == "codex");
  CHECK(agents[2].agent_cli == "gemini");
  auto has = [](const agent_spec& a, const char* name) {
    return std::find(a.env_passthrough.begin(), a.env_passthrough.end(),
                     name) != a.env_passthrough.end();
  };
  // Each gets its key from the node's environment, and only what is listed.
  CHECK(has(agents[0], "ANTHROPIC_API_KEY"));
  CHECK(has(agents[0], "HTTPS_PROXY"));
  CHECK_FALSE(has(agents[0], "OPENAI_API_KEY"));
  CHECK(has(agents[1], "OPENAI_API_KEY"));
  CHECK(has(agents[2], "GEMINI_API_KEY"));
  CHECK(agents[2].idle_timeout_s == 300);
  CHECK(agents[1].idle_noise == find_agent_profile("codex")->idle_noise);
  CHECK(t->settings.fatal == fatal_scope::provider);
  CHECK(validate_task(*t, "real-agents.json"));
}
