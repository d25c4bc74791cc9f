#include "node_setup.hpp"

#include "config_location.hpp"

#include "tasksup/runtime/docker_runtime.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>

namespace tasksup::app {

expected<loaded_config> load_node_config(const std::string& flag) {
  loaded_config out;
  auto dir = resolve_config_dir(flag);
  if (!dir) {
    out.config = builtin_config();
    return out;
  }
  auto cfg = load_config_dir(*dir);
  if (!cfg)
    return cfg.error();
  out.config = std::move(*cfg);
  out.dir = *dir;
  return out;
}

expected<std::shared_ptr<runtime::container_runtime>>
make_named_runtime(std::string_view name, const node_config& node,
                   const runtime_owner& owner) {
  auto warn = [](std::string_view message) { spdlog::warn("{}", message); };
  runtime::output_capture_limits limits;
  limits.log_bytes = node.output_log_max_bytes;
  limits.line_bytes = static_cast<std::size_t>(node.output_line_max_bytes);
  limits.attempt_bytes = node.output_attempt_max_bytes;
  if (name == "process") {
    runtime::process_runtime_options opts;
    opts.on_warning = warn;
    opts.output_limits = limits;
    opts.orphans = owner.orphans;
    auto ms = [](double s) {
      return std::chrono::milliseconds{static_cast<std::int64_t>(s * 1000)};
    };
    opts.shim_idle_timeout = ms(node.process_shim_idle_timeout_s);
    opts.shim_report_timeout = ms(node.process_shim_report_timeout_s);
    return runtime::make_process_runtime(std::move(opts));
  }
  if (name == "docker") {
    auto opts = runtime::docker_options_from_environment();
    if (!opts)
      return opts.error();
    opts->output_limits = limits;
    opts->owner = owner.name;
    return runtime::make_docker_runtime(std::move(*opts));
  }
  return error{{},
               {},
               "unknown runtime '" + std::string{name} + "' (expected one of " +
                 runtime_name_list() + ")"};
}

std::string fresh_work_dir(std::string_view kind) {
  auto now =
    std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  auto base = std::filesystem::temp_directory_path() / "tasksup";
  runtime::make_top_directory(base.string());
  return (base /
          (std::string{kind} + "-" + stamp + "-" + std::to_string(::getpid())))
    .string();
}

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<std::uint64_t>(
           std::chrono::steady_clock::now().time_since_epoch().count());
}

expected<bool> secure_state_dir(const std::string& dir) {
  std::error_code ec;
  bool existed = std::filesystem::exists(dir, ec);
  auto old_mode = make_state_dir_private(dir);
  if (!old_mode)
    return old_mode.error();
  // Said either way: a node started as root keeps its state in
  // /var/lib/tasksup, not where a user's would be.
  if (existed)
    spdlog::info("state directory {}", dir);
  else
    spdlog::info("created state directory {}", dir);
  if (*old_mode)
    spdlog::warn("state directory {} was mode {:04o}, open to other users; "
                 "made it 0700 (it holds the journal and task output)",
                 dir, **old_mode);
  return true;
}

void setup_logging(bool timestamps) {
  auto logger = spdlog::stderr_logger_mt("tasksup");
  logger->set_pattern(timestamps ? "%Y-%m-%d %H:%M:%S.%e tasksup %l: %v"
                                 : "tasksup: %l: %v");
  spdlog::set_default_logger(logger);
}

} // namespace tasksup::app
