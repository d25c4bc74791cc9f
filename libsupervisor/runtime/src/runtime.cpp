#include "tasksup/runtime/runtime.hpp"

#include <utility>

namespace tasksup::runtime {

namespace {

/// The handle of an attempt reported at once: nothing left to control.
class ended_handle final : public attempt_handle {
public:
  explicit ended_handle(std::string id) : id_(std::move(id)) {}
  void stop(std::chrono::milliseconds) override {}
  void kill() override {}
  std::string id() const override { return id_; }

private:
  std::string id_;
};

} // namespace

std::string member_state_dir(std::string_view attempt_root,
                             std::string_view task_id) {
  std::string dir{attempt_root};
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  dir += task_id;
  dir += "/state";
  return dir;
}

void add_trace_env(std::string_view trace_id, std::string_view span_id,
                   std::map<std::string, std::string>& env) {
  if (trace_id.empty() || span_id.empty())
    return;
  std::string parent;
  parent.reserve(trace_id.size() + span_id.size() + 7);
  parent.append("00-").append(trace_id).append("-").append(span_id);
  parent.append("-01");
  env["TASKSUP_TRACE_ID"] = trace_id;
  env["TASKSUP_SPAN_ID"] = span_id;
  env["TRACEPARENT"] = std::move(parent);
}

std::shared_ptr<attempt_handle> container_runtime::adopt(adopt_spec spec,
                                                         attempt_callbacks cb) {
  attempt_outcome out;
  out.exit_code = 1;
  out.infrastructure_error =
    "node restarted and the attempt could not be adopted: the " +
    std::string{name()} + " runtime's attempts do not outlive the node";
  if (cb.on_exit)
    cb.on_exit(std::move(out));
  return std::make_shared<ended_handle>(std::move(spec.runtime_id));
}

reap_report container_runtime::reap(const reap_spec&) {
  return {};
}

} // namespace tasksup::runtime
