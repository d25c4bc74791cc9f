#include "docker_core.hpp"

#include "tasksup/runtime/detail/docker_api.hpp"
#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/private_files.hpp"
#include "tasksup/supervisor/url_encode.hpp"

#include <boost/asio/post.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

#include <unistd.h>

namespace tasksup::runtime {

namespace detail {

detail::engine_endpoint endpoint_of(const docker_runtime_options& options) {
  detail::engine_endpoint ep;
  ep.socket_path = options.socket_path;
  ep.path_prefix = "/v" + options.api_version;
  ep.max_body_bytes = options.max_response_bytes;
  return ep;
}

engine_response sync_request(const docker_runtime_options& options,
                             std::string target, verb method) {
  asio::io_context io;
  engine_response out;
  detail::async_engine_request(
    io, endpoint_of(options), method, std::move(target), {},
    options.request_timeout,
    [&out](engine_response resp) { out = std::move(resp); });
  io.run();
  return out;
}

expected<detail::docker_memory_home>
memory_home_of(const docker_runtime_options& options) {
  if (!options.watch_memory)
    return error{"watch_memory", "", "off"};
  auto resp = sync_request(options, "/info");
  if (!resp.ok())
    return error{"/info", "", "the engine did not say how it runs containers"};
  auto info = detail::parse_docker_info(resp.body);
  if (!info)
    return info.error();
  return detail::find_docker_memory_home(
    options.socket_path, info->cgroup_driver, info->cgroup_version);
}

} // namespace detail

namespace {

using namespace detail;

class docker_runtime final : public container_runtime {
public:
  explicit docker_runtime(docker_runtime_options options)
    : core_(std::make_shared<docker_core>(std::move(options))) {
    thread_ = std::thread{[core = core_] { core->run(); }};
  }

  ~docker_runtime() override {
    asio::post(core_->io, [core = core_] { core->begin_shutdown(); });
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach(); // destroyed from a callback: the thread finishes alone
    else
      thread_.join();
  }

  std::string_view name() const noexcept override { return "docker"; }

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb) override {
    if (!core_->options.owner.empty())
      spec.labels["tasksup.owner"] = core_->options.owner;
    spec.labels["tasksup.owner_pid"] = owner_pid_;
    spec.labels["tasksup.owner_start"] = owner_start_;
    auto id = std::make_shared<id_box>();
    // Until the engine answers the create, the attempt is known by the name
    // it will be created with (the engine accepts either).
    id->set(core_->container_name(spec));
    return launch_docker_attempt(core_, std::move(spec), std::move(cb), id,
                                 std::nullopt);
  }

  std::shared_ptr<attempt_handle> adopt(adopt_spec spec,
                                        attempt_callbacks cb) override;

  reap_report reap(const reap_spec& spec) override;

private:
  std::shared_ptr<docker_core> core_;
  std::thread thread_;
  std::string owner_pid_ = std::to_string(::getpid());
  std::string owner_start_ =
    std::to_string(detail::process_start_time(::getpid()).value_or(0));
};

std::shared_ptr<attempt_handle> docker_runtime::adopt(adopt_spec spec,
                                                      attempt_callbacks cb) {
  auto container = spec.runtime_id;
  if (container.empty()) {
    // Found by its labels: the task's id and the attempt's number.
    auto list =
      list_docker_containers(core_->options, "tasksup.task_id=" + spec.task_id);
    if (list)
      for (auto& c : *list)
        if (auto it = c.labels.find("tasksup.attempt");
            it != c.labels.end() && it->second == std::to_string(spec.attempt))
          container = c.id;
  }
  auto id = std::make_shared<id_box>();
  id->set(container);
  attempt_spec as;
  as.task_id = std::move(spec.task_id);
  as.attempt = spec.attempt;
  as.agent_id = std::move(spec.agent_id);
  as.attempt_dir = std::move(spec.attempt_dir);
  as.labels = std::move(spec.labels);
  return launch_docker_attempt(core_, std::move(as), std::move(cb), id,
                               container);
}

reap_report docker_runtime::reap(const reap_spec& spec) {
  reap_report report;
  if (spec.owner.empty())
    return report;
  auto list =
    list_docker_containers(core_->options, "tasksup.owner=" + spec.owner);
  if (!list) {
    report.errors.push_back(list.error().to_string());
    return report;
  }
  for (auto& c : *list) {
    // An adopted attempt is kept by the id it was journaled with: the
    // container's name (its id is not known when the attempt starts).
    if (spec.keep.count(c.id) != 0 ||
        std::any_of(c.names.begin(), c.names.end(),
                    [&](const std::string& n) { return spec.keep.count(n); }))
      continue;
    auto label = [&](const char* key) {
      auto it = c.labels.find(key);
      return it == c.labels.end() ? std::string{} : it->second;
    };
    auto kept = std::any_of(
      spec.keep_attempts.begin(), spec.keep_attempts.end(), [&](auto& k) {
        return label("tasksup.task_id") == k.first &&
               label("tasksup.attempt") == std::to_string(k.second);
      });
    if (kept)
      continue;
    auto pid_text = label("tasksup.owner_pid");
    auto start_text = label("tasksup.owner_start");
    if (spec.dead_owners) {
      // Alive means: that pid runs and started when the owner did. Labels
      // that say nothing usable leave the container alone.
      char* end = nullptr;
      auto pid = std::strtol(pid_text.c_str(), &end, 10);
      if (pid_text.empty() || *end != '\0' || pid <= 1 || pid > 4'194'304)
        continue;
      auto start = detail::process_start_time(static_cast<pid_t>(pid));
      if (start && std::to_string(*start) == start_text)
        continue;
    }
    auto resp = sync_request(core_->options,
                             "/containers/" + url_encode(c.id) + "?force=1&v=1",
                             verb::delete_);
    auto what = "container " + c.id.substr(0, 12) + " (task '" +
                label("tasksup.task_id") + "' attempt " +
                label("tasksup.attempt") + ", owner " + spec.owner + " pid " +
                pid_text + ")";
    if (resp.ok() || resp.status == 404) {
      report.reaped.push_back("removed " + what);
      if (auto* home = core_->memory_home())
        for (auto& name : c.names)
          detail::remove_docker_memory_dirs(*home, name);
    } else
      report.errors.push_back(
        "cannot remove " + what + ": " +
        (resp.transport_error.empty()
           ? detail::docker_error_message(resp.status, resp.body)
           : resp.transport_error));
  }
  return report;
}

} // namespace

expected<docker_runtime_options> docker_options_from_environment() {
  docker_runtime_options options;
  if (const char* network = std::getenv("TASKSUP_DOCKER_NETWORK"))
    options.network_mode = network;
  const char* host = std::getenv("DOCKER_HOST");
  if (host == nullptr || *host == '\0')
    return options;
  std::string_view value{host};
  constexpr std::string_view scheme = "unix://";
  if (value.substr(0, scheme.size()) != scheme || value.size() == scheme.size())
    return error{"DOCKER_HOST", "",
                 "only unix:// sockets are supported, got '" +
                   std::string{value} + "'"};
  options.socket_path = std::string{value.substr(scheme.size())};
  return options;
}

std::shared_ptr<container_runtime>
make_docker_runtime(docker_runtime_options options) {
  return std::make_shared<docker_runtime>(std::move(options));
}

expected<std::string>
docker_engine_version(const docker_runtime_options& options) {
  auto resp = sync_request(options, "/version");
  if (!resp.transport_error.empty())
    return error{"docker engine", "", resp.transport_error};
  if (!resp.ok())
    return error{"docker engine", "/version",
                 detail::docker_error_message(resp.status, resp.body)};
  boost::system::error_code ec;
  auto value = boost::json::parse(resp.body, ec);
  auto* obj = ec ? nullptr : value.if_object();
  auto* version = obj ? obj->if_contains("Version") : nullptr;
  if (!version || !version->is_string())
    return error{"docker engine response", "/Version", "expected a string"};
  return std::string{version->as_string()};
}

expected<bool> docker_image_present(const docker_runtime_options& options,
                                    std::string_view image) {
  auto resp = sync_request(options, "/images/" + url_encode(image) + "/json");
  if (!resp.transport_error.empty())
    return error{"docker engine", "", resp.transport_error};
  if (resp.status == 404)
    return false;
  if (!resp.ok())
    return error{"docker engine", "/images",
                 detail::docker_error_message(resp.status, resp.body)};
  return true;
}

expected<std::vector<docker_container_summary>>
list_docker_containers(const docker_runtime_options& options,
                       std::string_view label) {
  boost::json::object filters;
  filters["label"] = boost::json::array{boost::json::string{label}};
  auto resp =
    sync_request(options, "/containers/json?all=1&filters=" +
                            url_encode(boost::json::serialize(filters)));
  if (!resp.transport_error.empty())
    return error{"docker engine", "", resp.transport_error};
  if (!resp.ok())
    return error{"docker engine", "/containers/json",
                 detail::docker_error_message(resp.status, resp.body)};
  return detail::parse_docker_container_list(resp.body);
}

} // namespace tasksup::runtime
