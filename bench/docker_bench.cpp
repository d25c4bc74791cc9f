// Docker runtime (issue 6, item 5): per-attempt wall time of one container
// run through the Engine API (the docker runtime: create, attach, start,
// wait, inspect, remove) against `docker run --rm` of the same image and
// command, alternating one of each so both see the same machine load.
// Without a reachable engine or the image it says so in its RESULT line.
//
//   bench_docker [--attempts=20] [--image=tasksup/busybox:test] [--cmd=false]
//
// The image comes from scripts/docker-setup.sh; the engine from DOCKER_HOST
// (and TASKSUP_DOCKER_NETWORK for an engine without a bridge).

#include "bench_util.hpp"
#include "spawn_loop.hpp"

#include "tasksup/runtime/docker_runtime.hpp"

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <stdlib.h>
#include <unistd.h>

namespace {

using namespace tasksup;
using namespace tasksup::bench;

void unavailable(const std::string& why) {
  std::fprintf(stderr, "bench_docker: %s\n", why.c_str());
  std::string reason;
  for (char c : why)
    reason += c == ' ' ? '_' : c;
  result_line{"docker"}
    .add("engine", "unavailable")
    .add("reason", reason)
    .print();
}

} // namespace

int main(int argc, char** argv) {
  auto attempts = arg_u64(argc, argv, "attempts", 20);
  auto image = arg_str(argc, argv, "image", "tasksup/busybox:test");
  auto cmd = arg_str(argc, argv, "cmd", "false");

  auto options = runtime::docker_options_from_environment();
  if (!options) {
    unavailable(options.error().to_string());
    return 0;
  }
  auto version = runtime::docker_engine_version(*options);
  if (!version) {
    unavailable("no engine: " + version.error().to_string());
    return 0;
  }
  auto present = runtime::docker_image_present(*options, image);
  if (!present || !*present) {
    unavailable("image " + image + " missing (run scripts/docker-setup.sh)");
    return 0;
  }
  char root_template[] = "/tmp/tasksup-bench-docker-XXXXXX";
  if (mkdtemp(root_template) == nullptr) {
    std::perror("bench_docker: mkdtemp");
    return 1;
  }
  std::string root = root_template;
  auto rt = runtime::make_docker_runtime(*options);

  std::vector<std::string> cli = {"docker", "run", "--rm"};
  if (!options->network_mode.empty()) {
    cli.push_back("--network");
    cli.push_back(options->network_mode);
  }
  cli.push_back(image);
  cli.push_back(cmd);

  std::vector<double> api_s;
  std::vector<double> cli_s;
  int expected_exit = -1;
  for (std::uint64_t i = 0; i < attempts; ++i) {
    std::mutex mtx;
    std::condition_variable cv;
    bool done = false;
    attempt_outcome result;
    runtime::attempt_spec spec;
    spec.task_id = "bench-docker";
    spec.attempt = static_cast<int>(i + 1);
    spec.agent_id = "bench";
    spec.argv = {cmd};
    spec.image = image;
    spec.attempt_dir = root + "/attempt-" + std::to_string(i + 1);
    runtime::attempt_callbacks cb;
    cb.on_line = [](runtime::output_stream, std::string_view) { return true; };
    cb.on_exit = [&](attempt_outcome out) {
      std::lock_guard<std::mutex> guard{mtx};
      result = std::move(out);
      done = true;
      cv.notify_one();
    };
    auto start = bench_clock::now();
    auto handle = rt->start(std::move(spec), std::move(cb));
    {
      std::unique_lock<std::mutex> lock{mtx};
      cv.wait(lock, [&] { return done; });
    }
    api_s.push_back(seconds_since(start));
    if (!result.infrastructure_error.empty()) {
      std::fprintf(stderr, "bench_docker: attempt failed: %s\n",
                   result.infrastructure_error.c_str());
      return 1;
    }
    start = bench_clock::now();
    auto cli_exit = run_quietly(cli);
    cli_s.push_back(seconds_since(start));
    if (i == 0)
      expected_exit = result.exit_code;
    if (cli_exit != expected_exit || result.exit_code != expected_exit) {
      std::fprintf(stderr,
                   "bench_docker: exit codes differ: API %d, docker run %d\n",
                   result.exit_code, cli_exit);
      return 1;
    }
  }
  rt.reset();
  std::filesystem::remove_all(root);

  auto mean = [](const std::vector<double>& xs) {
    double sum = 0;
    for (auto x : xs)
      sum += x;
    return sum / static_cast<double>(xs.size());
  };
  auto api_mean = mean(api_s) * 1e3;
  auto cli_mean = mean(cli_s) * 1e3;
  auto api_p50 = percentile(api_s, 0.5) * 1e3;
  auto cli_p50 = percentile(cli_s, 0.5) * 1e3;
  std::printf("engine %s, %llu attempts of %s %s: Engine API %.1f ms "
              "(p50 %.1f), docker run --rm %.1f ms (p50 %.1f)\n",
              version->c_str(), static_cast<unsigned long long>(attempts),
              image.c_str(), cmd.c_str(), api_mean, api_p50, cli_mean, cli_p50);
  result_line{"docker"}
    .add("engine", *version)
    .add("image", image)
    .add("cmd", cmd)
    .add("attempts", attempts)
    .fixed("api_ms", api_mean, 1)
    .fixed("api_p50_ms", api_p50, 1)
    .fixed("docker_run_ms", cli_mean, 1)
    .fixed("docker_run_p50_ms", cli_p50, 1)
    .fixed("ratio", api_mean / cli_mean, 2)
    .print();
  return 0;
}
