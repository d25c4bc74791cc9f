#include "tasksup/runtime/detail/docker_api.hpp"
#include "tasksup/supervisor/url_encode.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using namespace tasksup::runtime;
using namespace tasksup::runtime::detail;
namespace json = boost::json;

attempt_spec sample_spec() {
  attempt_spec spec;
  spec.task_id = "fix-login";
  spec.attempt = 2;
  spec.agent_id = "primary";
  spec.argv = {"codex", "exec", "--full-auto", "Fix the \"login\" test"};
  spec.env = {{"FOO", "bar"}, {"TASKSUP_ATTEMPT", "spoofed"}};
  spec.attempt_dir = "/var/lib/tasksup/a:b/attempt-2";
  spec.config_dir = "/home/u/.codex";
  spec.mounts = {{"/data", "/data", true}};
  spec.memory_limit_mb = 512;
  spec.image = "local/agent:1";
  spec.labels = {{"team", "a"}, {"tasksup.task_id", "spoofed"}};
  return spec;
}

json::object create_body(const attempt_spec& spec,
                         const docker_runtime_options& options = {}) {
  auto body = docker_create_body(spec, options);
  REQUIRE(body.has_value());
  return json::parse(*body).as_object();
}

} // namespace

TEST_CASE("docker create body carries argv, env, labels, mounts, limits") {
  auto body = create_body(sample_spec());
  CHECK(body.at("Image") == "local/agent:1");
  CHECK(body.at("Cmd") ==
        json::array{"codex", "exec", "--full-auto", "Fix the \"login\" test"});
  CHECK(body.at("Entrypoint") == json::array{});
  CHECK(body.at("Env") ==
        json::array{"FOO=bar", "TASKSUP_AGENT_CONFIG_DIR=/home/u/.codex",
                    "TASKSUP_ARTIFACTS_DIR=/tasksup/artifacts",
                    "TASKSUP_ATTEMPT=2",
                    "TASKSUP_DONE_FILE=/tasksup/artifacts/tasksup-done",
                    "TASKSUP_TASK_ID=fix-login"});
  CHECK(body.at("WorkingDir") == "/workspace");
  CHECK(body.at("Tty") == false);
  auto& labels = body.at("Labels").as_object();
  CHECK(labels.at("tasksup.task_id") == "fix-login");
  CHECK(labels.at("tasksup.attempt") == "2");
  CHECK(labels.at("tasksup.agent_id") == "primary");
  CHECK(labels.at("team") == "a");
  CHECK_FALSE(labels.contains("tasksup.trace_id"));
  auto& host = body.at("HostConfig").as_object();
  CHECK(host.at("Memory") == 512 * 1024 * 1024);
  CHECK(host.at("MemorySwap") == 512 * 1024 * 1024);
  CHECK(host.at("Init") == true);
  CHECK_FALSE(host.contains("NetworkMode"));
  auto& mounts = host.at("Mounts").as_array();
  REQUIRE(mounts.size() == 4);
  CHECK(mounts[0].at("Source") == "/var/lib/tasksup/a:b/attempt-2/workspace");
  CHECK(mounts[0].at("Target") == "/workspace");
  CHECK(mounts[0].at("ReadOnly") == false);
  CHECK(mounts[1].at("Source") == "/var/lib/tasksup/a:b/attempt-2/artifacts");
  CHECK(mounts[1].at("Target") == "/tasksup/artifacts");
  CHECK(mounts[2].at("Source") == "/home/u/.codex");
  CHECK(mounts[2].at("Target") == "/home/u/.codex");
  CHECK(mounts[2].at("ReadOnly") == true);
  CHECK(mounts[3].at("Type") == "bind");
  CHECK(mounts[3].at("ReadOnly") == true);
}

TEST_CASE("docker create body: the done file is in the artifacts directory as "
          "mounted, the trace id becomes a label and the trace context "
          "reaches the agent") {
  auto spec = sample_spec();
  spec.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  spec.span_id = "00f067aa0ba902b7";
  // The task's environment cannot move the done file elsewhere.
  spec.env["TASKSUP_DONE_FILE"] = "/elsewhere";
  auto body = create_body(spec);
  std::vector<std::string> env;
  for (auto& v : body.at("Env").as_array())
    env.emplace_back(v.as_string());
  CHECK(std::count(env.begin(), env.end(),
                   "TASKSUP_DONE_FILE=/tasksup/artifacts/tasksup-done") == 1);
  CHECK(std::count(env.begin(), env.end(), "TASKSUP_DONE_FILE=/elsewhere") ==
        0);
  // The host side of that mount is where the node looks for it.
  auto& mounts = body.at("HostConfig").at("Mounts").as_array();
  CHECK(mounts[1].at("Source") == "/var/lib/tasksup/a:b/attempt-2/artifacts");
  CHECK(mounts[1].at("Target") == "/tasksup/artifacts");
  CHECK(body.at("Labels").at("tasksup.trace_id") ==
        "4bf92f3577b34da6a3ce929d0e0e4736");
  // The trace context reaches the agent.
  CHECK(std::count(env.begin(), env.end(),
                   "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-"
                   "00f067aa0ba902b7-01") == 1);
  CHECK(std::count(env.begin(), env.end(),
                   "TASKSUP_SPAN_ID=00f067aa0ba902b7") == 1);
}

TEST_CASE("docker create body: the task's state directory is mounted "
          "writable and named in TASKSUP_MEMBER_STATE") {
  auto spec = sample_spec();
  spec.state_dir = member_state_dir("/var/lib/tasksup", "fix-login");
  spec.env["TASKSUP_MEMBER_STATE"] = "/elsewhere";
  auto body = create_body(spec);
  auto& env = body.at("Env").as_array();
  CHECK(std::count(env.begin(), env.end(),
                   "TASKSUP_MEMBER_STATE=/tasksup/state") == 1);
  CHECK(std::count(env.begin(), env.end(), "TASKSUP_MEMBER_STATE=/elsewhere") ==
        0);
  auto& mounts = body.at("HostConfig").at("Mounts").as_array();
  auto state = std::find_if(mounts.begin(), mounts.end(), [](auto& m) {
    return m.at("Target") == "/tasksup/state";
  });
  REQUIRE(state != mounts.end());
  CHECK(state->at("Source") == "/var/lib/tasksup/fix-login/state");
  CHECK(state->at("ReadOnly") == false);
  SECTION("none without a state directory") {
    auto plain = create_body(sample_spec());
    for (auto& e : plain.at("Env").as_array())
      CHECK(e.as_string().find("TASKSUP_MEMBER_STATE") == json::string::npos);
  }
}

TEST_CASE("docker create body: a workflow step's inputs file is mounted "
          "read-only where TASKSUP_INPUTS names it") {
  auto spec = sample_spec();
  spec.env["TASKSUP_INPUTS"] = "/var/lib/tasksup/wf.code/inputs.json";
  auto body = create_body(spec);
  auto& env = body.at("Env").as_array();
  CHECK(std::count(env.begin(), env.end(),
                   "TASKSUP_INPUTS=/tasksup/inputs.json") == 1);
  auto& mounts = body.at("HostConfig").at("Mounts").as_array();
  auto inputs = std::find_if(mounts.begin(), mounts.end(), [](auto& m) {
    return m.at("Target") == "/tasksup/inputs.json";
  });
  REQUIRE(inputs != mounts.end());
  CHECK(inputs->at("Source") == "/var/lib/tasksup/wf.code/inputs.json");
  CHECK(inputs->at("ReadOnly") == true);
  spec.env["TASKSUP_INPUTS"] = "relative/inputs.json";
  auto refused = docker_create_body(spec, {});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().path == "env/TASKSUP_INPUTS");
}

TEST_CASE("docker create body honours network mode, init and workdir") {
  auto spec = sample_spec();
  spec.workdir = "/src";
  spec.memory_limit_mb.reset();
  spec.config_dir.clear();
  docker_runtime_options options;
  options.network_mode = "none";
  options.init = false;
  auto body = create_body(spec, options);
  CHECK(body.at("WorkingDir") == "/src");
  auto& host = body.at("HostConfig").as_object();
  CHECK(host.at("NetworkMode") == "none");
  CHECK(host.at("Init") == false);
  CHECK_FALSE(host.contains("Memory"));
  CHECK(host.at("Mounts").as_array().size() == 3);
}

TEST_CASE("docker create body with a cgroup parent leaves the limit to it") {
  auto spec = sample_spec();
  auto body = docker_create_body(spec, {}, "/own/tasksup-docker/c-1");
  REQUIRE(body.has_value());
  auto parsed = json::parse(*body);
  auto& host = parsed.as_object().at("HostConfig").as_object();
  CHECK(host.at("CgroupParent") == "/own/tasksup-docker/c-1");
  // The parent holds the limit; a limit of the container's own would be
  // hit first and the parent's OOM watch would not see it.
  CHECK_FALSE(host.contains("Memory"));
  CHECK_FALSE(host.contains("MemorySwap"));
  // An impossible limit is still refused.
  spec.memory_limit_mb = std::uint64_t{1} << 60;
  CHECK_FALSE(docker_create_body(spec, {}, "/p").has_value());
}

TEST_CASE("docker info gives the engine's cgroup driver and version") {
  auto info = parse_docker_info(
    R"({"ID":"x","CgroupDriver":"cgroupfs","CgroupVersion":"2","Driver":"overlay2"})");
  REQUIRE(info.has_value());
  CHECK(info->cgroup_driver == "cgroupfs");
  CHECK(info->cgroup_version == "2");
  // Engines before API 1.40 do not say the version: v1.
  auto old = parse_docker_info(R"({"CgroupDriver":"systemd"})");
  REQUIRE(old.has_value());
  CHECK(old->cgroup_driver == "systemd");
  CHECK(old->cgroup_version == "1");
  CHECK(parse_docker_info(R"({"CgroupDriver":7})").error().path ==
        "/CgroupDriver");
  CHECK(
    parse_docker_info(R"({"CgroupVersion":")" + std::string(100, 'x') + R"("})")
      .error()
      .path == "/CgroupVersion");
  CHECK_FALSE(parse_docker_info("[1]").has_value());
  CHECK_FALSE(parse_docker_info("{").has_value());
}

TEST_CASE("docker create body rejects what the engine cannot express") {
  auto check_rejects = [](attempt_spec spec, const std::string& path) {
    auto body = docker_create_body(spec, {});
    REQUIRE_FALSE(body.has_value());
    CHECK(body.error().where == "attempt_spec");
    CHECK(body.error().path == path);
  };
  auto spec = sample_spec();
  spec.image.clear();
  check_rejects(spec, "image");
  spec = sample_spec();
  spec.argv.clear();
  check_rejects(spec, "argv");
  spec = sample_spec();
  spec.workdir = "relative/dir";
  check_rejects(spec, "workdir");
  spec = sample_spec();
  spec.attempt_dir = "relative";
  check_rejects(spec, "attempt_dir");
  spec = sample_spec();
  spec.env["A=B"] = "x";
  check_rejects(spec, "env/A=B");
  spec = sample_spec();
  spec.mounts.push_back({"/x", "relative", false});
  check_rejects(spec, "mounts/1/container_path");
  spec = sample_spec();
  spec.config_dir = "~/.codex";
  check_rejects(spec, "config_dir");
  spec = sample_spec();
  spec.memory_limit_mb = std::uint64_t{1} << 60;
  check_rejects(spec, "memory_limit_mb");
}

TEST_CASE("docker create response yields a hex container id") {
  auto id = parse_docker_create_response(
    R"({"Id":"4fa6e0f0c6786287e131c3852c58a2e01cc697a68231826813597e4994f1d6e2","Warnings":[]})");
  REQUIRE(id.has_value());
  CHECK(*id ==
        "4fa6e0f0c6786287e131c3852c58a2e01cc697a68231826813597e4994f1d6e2");
  CHECK_FALSE(parse_docker_create_response(R"({"Id":"../../etc"})"));
  CHECK_FALSE(parse_docker_create_response(R"({"Id":""})"));
  CHECK_FALSE(parse_docker_create_response(R"({"Id":7})"));
  auto bad = parse_docker_create_response("{not json");
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().what, Catch::Contains("invalid JSON"));
}

TEST_CASE("docker inspect and wait responses are parsed defensively") {
  auto state = parse_docker_inspect(
    R"({"Id":"x","State":{"Status":"exited","ExitCode":137,"OOMKilled":true,"Error":""}})");
  REQUIRE(state.has_value());
  CHECK(state->exit_code == 137);
  CHECK(state->oom_killed);
  auto missing = parse_docker_inspect(R"({"State":{"OOMKilled":false}})");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().path == "/State/ExitCode");
  CHECK_FALSE(parse_docker_inspect(R"({"State":{"ExitCode":"1"}})"));
  CHECK_FALSE(parse_docker_inspect(R"([])"));
  CHECK_FALSE(parse_docker_inspect(R"({"State":{"ExitCode":99999999999}})"));

  auto code = parse_docker_wait(R"({"StatusCode":3,"Error":null})");
  REQUIRE(code.has_value());
  CHECK(*code == 3);
  auto err =
    parse_docker_wait(R"({"StatusCode":-1,"Error":{"Message":"boom"}})");
  REQUIRE_FALSE(err.has_value());
  CHECK(err.error().what == "boom");
}

TEST_CASE("docker container list keeps ids, states and labels") {
  auto list = parse_docker_container_list(
    R"([{"Id":"ab","Names":["/tasksup-t-1-x"],"State":"running","Labels":{"tasksup.task_id":"t"}},{"Id":"cd","Names":["/",7],"Labels":null}])");
  REQUIRE(list.has_value());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].id == "ab");
  CHECK((*list)[0].names == std::vector<std::string>{"tasksup-t-1-x"});
  CHECK((*list)[0].state == "running");
  CHECK((*list)[0].labels.at("tasksup.task_id") == "t");
  CHECK((*list)[1].labels.empty());
  CHECK((*list)[1].names.empty());
  auto bad = parse_docker_container_list(R"([{"State":"running"}])");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().path == "/0/Id");
}

TEST_CASE("docker error messages are short, printable text") {
  CHECK(
    docker_error_message(404, R"({"message":"No such image: tasksup/x:y"})") ==
    "No such image: tasksup/x:y");
  CHECK(docker_error_message(500, "plain\ttext\n") == "plain text");
  CHECK(docker_error_message(502, "") == "HTTP 502");
  auto huge = docker_error_message(500, std::string(100000, 'z'));
  CHECK(huge.size() < 2000);
}

TEST_CASE("url_encode escapes everything outside the unreserved set") {
  CHECK(tasksup::url_encode(R"({"label":["a=b"]})") ==
        "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D");
  CHECK(tasksup::url_encode("a-b_c.d~e") == "a-b_c.d~e");
}
