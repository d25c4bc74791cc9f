// The floor for the process runtime (issue 6, item 3): a plain
// posix_spawn + waitpid loop of one binary, nothing else. bench_process runs
// the same loop in its own run for the ratio; this program reports the loop
// alone.
//
//   bench_spawn_loop [--n=2000] [--binary=/bin/false]

#include "bench_util.hpp"
#include "spawn_loop.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  using namespace tasksup::bench;
  auto n = arg_u64(argc, argv, "n", 2000);
  auto binary = arg_str(argc, argv, "binary", "/bin/false");
  auto loop = spawn_loop(binary, n);
  if (!loop.ok) {
    std::fprintf(stderr, "bench_spawn_loop: posix_spawn %s failed\n",
                 binary.c_str());
    return 1;
  }
  result_line{"spawn_loop"}
    .add("binary", binary)
    .add("n", n)
    .fixed("per_spawn_us", loop.seconds / static_cast<double>(n) * 1e6, 1)
    .fixed("spawns_per_s", static_cast<double>(n) / loop.seconds, 0)
    .print();
  return 0;
}
