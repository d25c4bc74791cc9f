#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

/// Small helpers shared by the benchmark programs: a monotonic clock,
/// percentiles, RSS, the machine's load and the final RESULT line.
namespace tasksup::bench {

/// The clock every benchmark measures with.
using bench_clock = std::chrono::steady_clock;

/// Seconds elapsed since `start`.
inline double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

/// The `q` quantile (0..1) of `xs` by nearest rank; sorts `xs`. 0 when empty.
inline double percentile(std::vector<double>& xs, double q) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto rank = static_cast<std::size_t>(q * static_cast<double>(xs.size()));
  return xs[std::min(rank, xs.size() - 1)];
}

/// Resident set size of this process in bytes, from /proc/self/statm.
inline std::uint64_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

/// The 1-minute load average, from /proc/loadavg (other work on the machine
/// skews every figure; each RESULT line carries it).
inline double load_average() {
  std::ifstream in{"/proc/loadavg"};
  double one = 0;
  in >> one;
  return one;
}

/// Reads a positive integer option `--name=value` from argv, or `fallback`.
inline std::uint64_t arg_u64(int argc, char** argv, std::string_view name,
                             std::uint64_t fallback) {
  std::string prefix = "--" + std::string{name} + "=";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg{argv[i]};
    if (arg.substr(0, prefix.size()) == prefix)
      return std::strtoull(argv[i] + prefix.size(), nullptr, 10);
  }
  return fallback;
}

/// Reads a string option `--name=value` from argv, or `fallback`.
inline std::string arg_str(int argc, char** argv, std::string_view name,
                           std::string fallback) {
  std::string prefix = "--" + std::string{name} + "=";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg{argv[i]};
    if (arg.substr(0, prefix.size()) == prefix)
      return std::string{arg.substr(prefix.size())};
  }
  return fallback;
}

/// Builds the final `RESULT name=... key=value ...` line.
class result_line {
public:
  /// Starts a line for the benchmark `name`.
  explicit result_line(std::string_view name) {
    out_ << "RESULT name=" << name;
  }

  /// Adds `key=value`.
  template<class T>
  result_line& add(std::string_view key, const T& value) {
    out_ << ' ' << key << '=' << value;
    return *this;
  }

  /// Adds `key=value` with a fixed number of decimals.
  result_line& fixed(std::string_view key, double value, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    out_ << ' ' << key << '=' << buf;
    return *this;
  }

  /// Prints the line (with the current load average) and flushes stdout.
  void print() {
    fixed("load1", load_average(), 2);
    std::printf("%s\n", out_.str().c_str());
    std::fflush(stdout);
  }

private:
  std::ostringstream out_;
};

} // namespace tasksup::bench
