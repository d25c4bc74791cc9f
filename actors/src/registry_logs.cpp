#include "registry_state.hpp"

#include "attempt_log.hpp"

#include <filesystem>

namespace tasksup::detail {

log_chunk read_log(registry_ptr self, const std::string& task_id, int attempt,
                   std::uint64_t offset) {
  auto& st = self->state;
  auto finished = st.finished.count(task_id) > 0;
  // Only a known task's id becomes a path (ids are validated at submit).
  if (!finished && st.active.count(task_id) == 0)
    return unknown_task_error(st, task_id);
  auto dir = (std::filesystem::path{st.opts.attempt_root} / task_id).string();
  auto here = read_attempt_log(dir, attempt, offset, finished);
  if (!here || !here->found) {
    // Its attempts ran on a worker node: the log is there.
    if (auto i = st.placed_on.find(task_id); i != st.placed_on.end()) {
      if (auto n = st.nodes.find(i->second); n != st.nodes.end())
        return self->delegate(n->second.agent, logs_atom::value, task_id,
                              attempt, offset, finished);
      return make_error(protocol_error::unknown_task,
                        "the attempts of task '" + task_id +
                          "' ran on worker node " + i->second +
                          ", which has not joined now: their output is in "
                          "<its attempts directory>/" +
                          task_id + "/attempt-<n>/output.log there");
    }
  }
  if (!here)
    return make_error(protocol_error::unknown_task, "task '" + task_id +
                                                      "' has no attempt " +
                                                      std::to_string(attempt));
  return log_chunk{here->attempt, here->next, std::move(here->data),
                   here->complete};
}

} // namespace tasksup::detail
