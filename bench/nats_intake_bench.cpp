// JetStream intake (issue 35): how many tasks a node journals per second
// from a NATS stream. A real nats-server (-js, loopback, storage in a
// scratch directory) gets N submissions with message ids in the stream
// `TASKSUP` before the node starts; the node (`tasksup serve --nats`, its
// journal with full sync, events published) then takes them. The figure is
// N over the time from the first message the node took to the last one it
// acked (each acked only once its task is journaled), read from the
// consumer's figures every 2 ms. The node runs one attempt at a time
// (/bin/true): its tasks queue, so running them hardly competes with
// taking them.
//
//   bench_nats_intake --tasksup=build/apps/tasksup [--messages=20000]
//                     [--events=0]   # the node publishes no events

#include "bench_util.hpp"

#include <nats/nats.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

namespace {

using namespace tasksup::bench;
using namespace std::chrono_literals;

[[noreturn]] void fail(const std::string& why) {
  std::cerr << "bench_nats_intake: " << why << '\n';
  std::exit(1);
}

void check(natsStatus s, const char* what) {
  if (s != NATS_OK)
    fail(std::string{what} + ": " + natsStatus_GetText(s));
}

/// Starts `argv` with stdout and stderr to `log`.
pid_t start(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> store = args;
  std::vector<char*> argv;
  for (auto& a : store)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0)
    fail("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, {}};
}

} // namespace

int main(int argc, char** argv) {
  auto tasksup = arg_str(argc, argv, "tasksup", "");
  auto n = arg_u64(argc, argv, "messages", 20000);
  // --events=0: the node publishes no events (what publishing costs).
  auto events = arg_u64(argc, argv, "events", 1) != 0;
  if (tasksup.empty())
    fail("--tasksup=PATH is required");
  tasksup = std::filesystem::absolute(tasksup);
  char tmpl[] = "/tmp/tasksup-nats-bench-XXXXXX";
  std::string work = ::mkdtemp(tmpl);
  std::filesystem::create_directories(work + "/ports");
  std::filesystem::create_directories(work + "/config");

  auto server =
    start({"/usr/sbin/nats-server", "-js", "-a", "127.0.0.1", "-p", "-1", "-sd",
           work + "/store", "--ports_file_dir", work + "/ports"},
          work + "/nats.log");
  std::string url;
  const std::regex url_re{"\"(nats://127\\.0\\.0\\.1:[0-9]+)\""};
  for (int i = 0; i < 500 && url.empty(); ++i) {
    std::smatch m;
    auto text =
      slurp(work + "/ports/nats-server_" + std::to_string(server) + ".ports");
    if (std::regex_search(text, m, url_re))
      url = m[1];
    else
      std::this_thread::sleep_for(10ms);
  }
  if (url.empty())
    fail("nats-server did not start");

  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  check(natsConnection_ConnectTo(&nc, url.c_str()), "connect");
  check(natsConnection_JetStream(&js, nc, nullptr), "jetstream");
  // The stream as the node makes it.
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char* subjects[] = {"tasksup.submit"};
  cfg.Name = "TASKSUP";
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Retention = js_WorkQueuePolicy;
  cfg.Storage = js_FileStorage;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = jsErrCode{};
  check(js_AddStream(&si, js, &cfg, nullptr, &jerr), "add stream");
  jsStreamInfo_Destroy(si);
  auto pub_start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    auto id = "m-" + std::to_string(i);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id.c_str();
    std::string body = R"({"prompt": "x"})";
    check(js_PublishAsync(js, "tasksup.submit", body.data(),
                          static_cast<int>(body.size()), &po),
          "publish");
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 120000;
  check(js_PublishAsyncComplete(js, &po), "publish complete");
  auto publish_s = seconds_since(pub_start);

  std::ofstream{work + "/config/node.json"}
    << R"({"max_concurrent": 1, "default_agent": {"agent_id": "t", )"
    << R"("agent_cli": "/bin/true", "cli_flags": "", )"
    << R"("prompt_as_argument": true}, "default_runtime": "process"})";
  std::vector<std::string> serve{tasksup,
                                 "serve",
                                 "--listen",
                                 "127.0.0.1:0",
                                 "--config",
                                 work + "/config",
                                 "--state-dir",
                                 work + "/state",
                                 "--nats",
                                 url,
                                 "--nats-max-backlog",
                                 std::to_string(n + 1)};
  if (!events)
    serve.insert(serve.end(), {"--nats-events", ""});
  auto node = start(serve, work + "/node.log");
  // From the first message taken to the last acked.
  std::optional<bench_clock::time_point> first;
  std::optional<double> took_s;
  auto deadline = bench_clock::now() + 600s;
  while (bench_clock::now() < deadline && !took_s) {
    jsConsumerInfo* ci = nullptr;
    jerr = jsErrCode{};
    if (js_GetConsumerInfo(&ci, js, "TASKSUP", "tasksup", nullptr, &jerr) ==
        NATS_OK) {
      if (!first && ci->Delivered.Stream > 0)
        first = bench_clock::now();
      if (ci->NumPending == 0 && ci->NumAckPending == 0 &&
          ci->AckFloor.Stream >= n)
        took_s = seconds_since(*first);
      jsConsumerInfo_Destroy(ci);
    }
    std::this_thread::sleep_for(2ms);
  }
  ::kill(node, SIGKILL);
  ::kill(server, SIGTERM);
  ::waitpid(node, nullptr, 0);
  ::waitpid(server, nullptr, 0);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  if (!took_s)
    fail("the node did not take every message in 10 minutes; see " + work);
  std::filesystem::remove_all(work);
  result_line{"nats_intake"}
    .add("messages", n)
    .add("events", events ? "published" : "none")
    .fixed("publish_s", publish_s, 2)
    .fixed("intake_s", *took_s, 2)
    .fixed("tasks_per_s", static_cast<double>(n) / *took_s, 0)
    .print();
}
