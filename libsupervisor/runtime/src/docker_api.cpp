#include "tasksup/runtime/detail/docker_api.hpp"

#include "tasksup/supervisor/text.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <limits>

namespace tasksup::runtime::detail {

namespace json = boost::json;

namespace {

/// Where a container sees a workflow step's inputs file (the host path the
/// registry names in TASKSUP_INPUTS, mounted read-only).
constexpr std::string_view docker_inputs_file = "/tasksup/inputs.json";

constexpr std::size_t max_message_bytes = 1024;

error spec_error(std::string path, std::string what) {
  return error{"attempt_spec", std::move(path), std::move(what)};
}

error engine_error(std::string path, std::string what) {
  return error{"docker engine response", std::move(path), std::move(what)};
}

bool absolute(std::string_view path) {
  return !path.empty() && path.front() == '/';
}

// Keeps engine text printable and short: it ends up in events and logs.
std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  for (char c : text) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

json::value parse_json(std::string_view body, boost::system::error_code& ec) {
  return json::parse(body, ec);
}

} // namespace

expected<std::string> docker_create_body(const attempt_spec& spec,
                                         const docker_runtime_options& options,
                                         std::string_view cgroup_parent) {
  if (spec.image.empty())
    return spec_error("image", "the docker runtime needs an image");
  if (spec.argv.empty() || spec.argv.front().empty())
    return spec_error("argv", "no command to run");
  if (!absolute(spec.attempt_dir))
    return spec_error("attempt_dir", "must be an absolute host path, got '" +
                                       spec.attempt_dir + "'");
  std::string workdir =
    spec.workdir.empty() ? std::string{docker_workspace_dir} : spec.workdir;
  if (!absolute(workdir))
    return spec_error("workdir", "must be an absolute path inside the "
                                 "container, got '" +
                                   workdir + "'");
  json::object body;
  body["Image"] = spec.image;
  json::array cmd;
  for (auto& arg : spec.argv)
    cmd.emplace_back(arg);
  body["Cmd"] = std::move(cmd);
  // The image's entrypoint would change what argv means.
  body["Entrypoint"] = json::array{};
  std::map<std::string, std::string> env = spec.env;
  for (auto& [key, value] : env) {
    if (key.empty() || key.find('=') != std::string::npos ||
        key.find('\0') != std::string::npos)
      return spec_error("env/" + key, "invalid variable name");
    if (value.find('\0') != std::string::npos)
      return spec_error("env/" + key, "value contains a NUL byte");
  }
  add_trace_env(spec.trace_id, spec.span_id, env);
  env["TASKSUP_TASK_ID"] = spec.task_id;
  env["TASKSUP_ATTEMPT"] = std::to_string(spec.attempt);
  env["TASKSUP_ARTIFACTS_DIR"] = std::string{docker_artifacts_dir};
  // In the artifacts directory as mounted, so the node finds it on the host.
  env["TASKSUP_DONE_FILE"] =
    std::string{docker_artifacts_dir} + '/' + std::string{done_file_name};
  if (!spec.config_dir.empty())
    env["TASKSUP_AGENT_CONFIG_DIR"] = spec.config_dir;
  if (!spec.feedback.empty())
    env["TASKSUP_FEEDBACK"] = std::string{docker_feedback_file};
  if (!spec.state_dir.empty())
    env["TASKSUP_MEMBER_STATE"] = std::string{docker_member_state_dir};
  // A workflow step's inputs, written on the host.
  std::string inputs;
  if (auto i = env.find("TASKSUP_INPUTS"); i != env.end()) {
    if (!absolute(i->second))
      return spec_error("env/TASKSUP_INPUTS",
                        "must be an absolute host path, got '" + i->second +
                          "'");
    inputs = i->second;
    i->second = std::string{docker_inputs_file};
  }
  json::array env_list;
  for (auto& [key, value] : env)
    env_list.emplace_back(key + "=" + value);
  body["Env"] = std::move(env_list);
  body["WorkingDir"] = workdir;
  json::object labels;
  for (auto& [key, value] : spec.labels)
    labels[key] = value;
  labels["tasksup.task_id"] = spec.task_id;
  labels["tasksup.attempt"] = std::to_string(spec.attempt);
  labels["tasksup.agent_id"] = spec.agent_id;
  // The attempt's trace, for finding its containers from a trace.
  if (!spec.trace_id.empty())
    labels["tasksup.trace_id"] = spec.trace_id;
  body["Labels"] = std::move(labels);
  body["Tty"] = false;
  body["OpenStdin"] = false;
  body["AttachStdin"] = false;
  body["AttachStdout"] = false;
  body["AttachStderr"] = false;

  json::object host;
  // Mounts rather than Binds: structured fields survive ':' and ',' in
  // paths, and a missing source is an error instead of a new empty dir.
  json::array mounts;
  auto add_mount = [&mounts](const std::string& source, std::string_view target,
                             bool read_only) {
    json::object m;
    m["Type"] = "bind";
    m["Source"] = source;
    m["Target"] = target;
    m["ReadOnly"] = read_only;
    mounts.emplace_back(std::move(m));
  };
  add_mount(spec.attempt_dir + "/workspace", docker_workspace_dir, false);
  add_mount(spec.attempt_dir + "/artifacts", docker_artifacts_dir, false);
  if (!spec.feedback.empty())
    add_mount(spec.attempt_dir + "/" + std::string{feedback_file_name},
              docker_feedback_file, true);
  if (!spec.state_dir.empty())
    add_mount(spec.state_dir, docker_member_state_dir, false);
  if (!inputs.empty())
    add_mount(inputs, docker_inputs_file, true);
  if (!spec.config_dir.empty()) {
    if (!absolute(spec.config_dir))
      return spec_error("config_dir", "must be an absolute host path, got '" +
                                        spec.config_dir + "'");
    add_mount(spec.config_dir, spec.config_dir, true);
  }
  for (std::size_t i = 0; i < spec.mounts.size(); ++i) {
    auto& m = spec.mounts[i];
    auto path = "mounts/" + std::to_string(i);
    if (!absolute(m.host_path))
      return spec_error(path + "/host_path", "must be an absolute host path, "
                                             "got '" +
                                               m.host_path + "'");
    if (!absolute(m.container_path))
      return spec_error(path + "/container_path",
                        "must be an absolute path, got '" + m.container_path +
                          "'");
    add_mount(m.host_path, m.container_path, m.read_only);
  }
  host["Mounts"] = std::move(mounts);
  if (spec.memory_limit_mb) {
    constexpr std::uint64_t mib = 1024 * 1024;
    auto limit =
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (*spec.memory_limit_mb == 0 || *spec.memory_limit_mb > limit / mib)
      return spec_error("memory_limit_mb", "out of range");
    auto bytes = static_cast<std::int64_t>(*spec.memory_limit_mb * mib);
    if (cgroup_parent.empty()) {
      host["Memory"] = bytes;
      // Swap equal to memory: no swap, so exceeding the limit is an OOM
      // kill.
      host["MemorySwap"] = bytes;
    }
  }
  if (!cgroup_parent.empty())
    host["CgroupParent"] = cgroup_parent;
  if (!options.network_mode.empty())
    host["NetworkMode"] = options.network_mode;
  host["Init"] = options.init;
  body["HostConfig"] = std::move(host);
  return json::serialize(body);
}

expected<docker_engine_info> parse_docker_info(std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (ec)
    return engine_error("", "info: invalid JSON: " + ec.message());
  auto* obj = value.if_object();
  if (!obj)
    return engine_error("", "info: expected an object");
  docker_engine_info out;
  auto text = [&](const char* key, std::string& to) -> bool {
    auto* v = obj->if_contains(key);
    if (!v)
      return true;
    if (!v->is_string() || v->as_string().size() > 64)
      return false;
    to = std::string{v->as_string()};
    return true;
  };
  if (!text("CgroupDriver", out.cgroup_driver))
    return engine_error("/CgroupDriver", "info: expected a short string");
  if (!text("CgroupVersion", out.cgroup_version))
    return engine_error("/CgroupVersion", "info: expected a short string");
  return out;
}

expected<std::string> parse_docker_create_response(std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (ec)
    return engine_error("", "create: invalid JSON: " + ec.message());
  auto* obj = value.if_object();
  auto* id = obj ? obj->if_contains("Id") : nullptr;
  auto* text = id ? id->if_string() : nullptr;
  if (!text)
    return engine_error("/Id", "create: expected a string");
  if (text->empty() || text->size() > 128)
    return engine_error("/Id", "create: bad container id length");
  if (!lower_hex({text->data(), text->size()}))
    return engine_error("/Id", "create: container id is not hex");
  return std::string{text->c_str(), text->size()};
}

expected<docker_container_state> parse_docker_inspect(std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (ec)
    return engine_error("", "inspect: invalid JSON: " + ec.message());
  auto* obj = value.if_object();
  auto* state_value = obj ? obj->if_contains("State") : nullptr;
  auto* state = state_value ? state_value->if_object() : nullptr;
  if (!state)
    return engine_error("/State", "inspect: expected an object");
  docker_container_state out;
  auto* exit_code = state->if_contains("ExitCode");
  if (!exit_code || !exit_code->is_int64() ||
      exit_code->as_int64() < std::numeric_limits<int>::min() ||
      exit_code->as_int64() > std::numeric_limits<int>::max())
    return engine_error("/State/ExitCode", "inspect: expected an integer");
  out.exit_code = static_cast<int>(exit_code->as_int64());
  if (auto* oom = state->if_contains("OOMKilled")) {
    if (!oom->is_bool())
      return engine_error("/State/OOMKilled", "inspect: expected a boolean");
    out.oom_killed = oom->as_bool();
  }
  if (auto* err = state->if_contains("Error"); err && err->is_string())
    out.error = printable(err->as_string(), max_message_bytes);
  if (auto* running = state->if_contains("Running")) {
    if (!running->is_bool())
      return engine_error("/State/Running", "inspect: expected a boolean");
    out.running = running->as_bool();
  }
  auto* config_value = obj->if_contains("Config");
  auto* config = config_value ? config_value->if_object() : nullptr;
  auto* labels = config ? config->if_contains("Labels") : nullptr;
  if (labels && labels->is_object())
    for (auto& [key, val] : labels->as_object())
      if (val.is_string())
        out.labels.emplace(std::string{key}, std::string{val.as_string()});
  return out;
}

expected<int> parse_docker_wait(std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (ec)
    return engine_error("", "wait: invalid JSON: " + ec.message());
  auto* obj = value.if_object();
  if (!obj)
    return engine_error("", "wait: expected an object");
  if (auto* err = obj->if_contains("Error"); err && err->is_object()) {
    auto* msg = err->as_object().if_contains("Message");
    if (msg && msg->is_string() && !msg->as_string().empty())
      return engine_error("/Error/Message",
                          printable(msg->as_string(), max_message_bytes));
  }
  auto* code = obj->if_contains("StatusCode");
  if (!code || !code->is_int64() ||
      code->as_int64() < std::numeric_limits<int>::min() ||
      code->as_int64() > std::numeric_limits<int>::max())
    return engine_error("/StatusCode", "wait: expected an integer");
  return static_cast<int>(code->as_int64());
}

expected<std::vector<docker_container_summary>>
parse_docker_container_list(std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (ec)
    return engine_error("", "list: invalid JSON: " + ec.message());
  auto* list = value.if_array();
  if (!list)
    return engine_error("", "list: expected an array");
  std::vector<docker_container_summary> out;
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto path = "/" + std::to_string(i);
    auto* obj = (*list)[i].if_object();
    auto* id = obj ? obj->if_contains("Id") : nullptr;
    if (!id || !id->is_string())
      return engine_error(path + "/Id", "list: expected a string");
    docker_container_summary item;
    item.id = std::string{id->as_string()};
    if (auto* state = obj->if_contains("State"); state && state->is_string())
      item.state = std::string{state->as_string()};
    if (auto* names = obj->if_contains("Names"); names && names->is_array())
      for (auto& n : names->as_array())
        if (n.is_string() && n.as_string().size() > 1)
          item.names.emplace_back(n.as_string().data() + 1,
                                  n.as_string().size() - 1);
    if (auto* labels = obj->if_contains("Labels");
        labels && labels->is_object()) {
      for (auto& [key, val] : labels->as_object()) {
        if (val.is_string())
          item.labels.emplace(std::string{key}, std::string{val.as_string()});
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

std::string docker_error_message(unsigned status, std::string_view body) {
  boost::system::error_code ec;
  auto value = parse_json(body, ec);
  if (!ec) {
    if (auto* obj = value.if_object()) {
      auto* msg = obj->if_contains("message");
      if (msg && msg->is_string() && !msg->as_string().empty())
        return printable(msg->as_string(), max_message_bytes);
    }
  }
  auto text = printable(body, max_message_bytes);
  if (!text.empty())
    return text;
  return "HTTP " + std::to_string(status);
}

} // namespace tasksup::runtime::detail
