#include "attempt_log.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tasksup::detail {

std::optional<attempt_log_chunk> read_attempt_log(const std::string& task_dir,
                                                  int attempt,
                                                  std::uint64_t offset,
                                                  bool finished) {
  namespace fs = std::filesystem;
  int latest = 0;
  std::error_code ec;
  for (fs::directory_iterator i{task_dir, ec}, end; !ec && i != end;
       i.increment(ec)) {
    auto name = i->path().filename().string();
    if (name.rfind("attempt-", 0) == 0)
      latest = std::max(latest, std::atoi(name.c_str() + 8));
  }
  if (attempt <= 0)
    attempt = latest;
  attempt_log_chunk out;
  if (attempt <= 0) {
    out.complete = finished;
    return out;
  }
  auto path =
    fs::path{task_dir} / ("attempt-" + std::to_string(attempt)) / "output.log";
  if (auto* f = std::fopen(path.c_str(), "rb")) {
    out.found = true;
    if (std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0) {
      out.data.resize(log_chunk_bytes);
      out.data.resize(std::fread(out.data.data(), 1, out.data.size(), f));
    }
    std::fclose(f);
  } else if (attempt > latest) {
    return std::nullopt;
  }
  out.attempt = attempt;
  out.complete = out.data.empty() && (finished || attempt < latest);
  out.next = offset + out.data.size();
  return out;
}

} // namespace tasksup::detail
