#include "registry_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tasksup::detail {

/// The most output one `logs` answer carries.
constexpr std::size_t log_chunk_bytes = 64 * 1024;

log_chunk read_log(registry_ptr self, const std::string& task_id, int attempt,
                   std::uint64_t offset) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  auto finished = st.finished.count(task_id) > 0;
  // Only a known task's id becomes a path (ids are validated at submit).
  if (!finished && st.active.count(task_id) == 0)
    return make_error(protocol_error::unknown_task,
                      "no task with id '" + task_id + "'");
  auto dir = fs::path{st.opts.attempt_root} / task_id;
  int latest = 0;
  std::error_code ec;
  for (fs::directory_iterator i{dir, ec}, end; !ec && i != end;
       i.increment(ec)) {
    auto name = i->path().filename().string();
    if (name.rfind("attempt-", 0) == 0)
      latest = std::max(latest, std::atoi(name.c_str() + 8));
  }
  if (attempt <= 0)
    attempt = latest;
  if (attempt <= 0)
    return log_chunk{0, std::uint64_t{0}, std::string{}, finished};
  auto path = dir / ("attempt-" + std::to_string(attempt)) / "output.log";
  std::string data;
  if (auto* f = std::fopen(path.c_str(), "rb")) {
    if (std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0) {
      data.resize(log_chunk_bytes);
      data.resize(std::fread(data.data(), 1, data.size(), f));
    }
    std::fclose(f);
  } else if (attempt > latest) {
    return make_error(protocol_error::unknown_task, "task '" + task_id +
                                                      "' has no attempt " +
                                                      std::to_string(attempt));
  }
  auto complete = data.empty() && (finished || attempt < latest);
  auto next = offset + data.size();
  return log_chunk{attempt, next, std::move(data), complete};
}

} // namespace tasksup::detail
