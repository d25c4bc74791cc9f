// Adoption: a docker attempt takes over the container another instance of
// the runtime started (after a node restart), and replays what its log
// already holds.

#include "docker_attempt.hpp"

#include "tasksup/runtime/detail/docker_api.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include <sys/stat.h>

namespace tasksup::runtime::detail {

namespace fs = std::filesystem;

/// Takes over container `id`, started by another instance of the runtime.
void docker_attempt::begin_adopt(std::string id) {
  adopting_ = true;
  phase_ = phase::creating;
  auto valid = !id.empty() && id.size() <= 128 &&
               std::all_of(id.begin(), id.end(), [](char c) {
                 return std::isalnum(static_cast<unsigned char>(c)) ||
                        c == '_' || c == '.' || c == '-';
               });
  if (!valid) {
    not_adopted("no usable container id ('" + id.substr(0, 64) + "')");
    return;
  }
  name_ = id;
  container_id_ = id;
  // Journaled by name: its memory cgroup, if it has one, is watched from
  // now on.
  if (auto* home = core_->memory_home())
    if (auto w = detail::docker_memory_watch::existing(*home, id))
      memory_watch_.emplace(std::move(*w));
  step_ = request(verb::get, container_path() + "/json", {},
                  core_->options.request_timeout,
                  [](docker_attempt& self, engine_response resp) {
                    self.on_adopt_inspected(std::move(resp));
                  });
}

void docker_attempt::make_demux() {
  demux_.emplace([this](int stream, std::string_view bytes) {
    auto s = stream == 2 ? output_stream::err : output_stream::out;
    // An adopted container's output starts with what the log holds.
    if (replayed_ < replay_bytes_) {
      auto n = static_cast<std::size_t>(
        std::min<std::uint64_t>(bytes.size(), replay_bytes_ - replayed_));
      replaying_ = true;
      capture_->feed(s, bytes.substr(0, n));
      replaying_ = false;
      replayed_ += n;
      bytes.remove_prefix(n);
    }
    capture_->feed(s, bytes);
  });
}

void docker_attempt::not_adopted(std::string why) {
  fail("node restarted and the attempt could not be adopted: " +
       std::move(why));
  complete();
}

void docker_attempt::on_adopt_inspected(engine_response resp) {
  if (resp.status == 404) {
    not_adopted("container " + container_id_ + " is gone");
    return;
  }
  if (!resp.ok()) {
    not_adopted("docker inspect of " + container_id_ +
                " failed: " + engine_text(resp));
    return;
  }
  auto state = detail::parse_docker_inspect(resp.body);
  if (!state) {
    not_adopted(state.error().to_string());
    return;
  }
  auto label = [&](const std::string& key) {
    auto it = state->labels.find(key);
    return it == state->labels.end() ? std::string{} : it->second;
  };
  // A container of another attempt is not ours to watch or remove.
  if (label("tasksup.task_id") != spec_.task_id ||
      label("tasksup.attempt") != std::to_string(spec_.attempt)) {
    fail("node restarted and the attempt could not be adopted: container " +
         container_id_ + " belongs to task '" + label("tasksup.task_id") +
         "' attempt " + label("tasksup.attempt"));
    phase_ = phase::done;
    complete_now();
    return;
  }
  // The output is read again from the container's start: what the log
  // holds already is neither appended nor delivered again, only fed to
  // the tail.
  auto log = (fs::path{spec_.attempt_dir} / "output.log").string();
  struct stat st {};
  if (::stat(log.c_str(), &st) == 0 && st.st_size > 0)
    replay_bytes_ = static_cast<std::uint64_t>(st.st_size);
  auto on_line = [this](output_stream stream, std::string_view line) {
    if (replaying_ || !cb_.on_line)
      return true;
    return cb_.on_line(stream, line);
  };
  auto capture =
    output_capture::append_to(log, on_line, core_->options.output_limits);
  // Without its log the attempt is still watched to its end (and its
  // container removed); its lines and tail still arrive.
  if (!capture)
    capture = output_capture::create({}, on_line, core_->options.output_limits);
  if (!capture) {
    not_adopted(capture.error().to_string());
    return;
  }
  capture_.emplace(std::move(*capture));
  capture_->skip_logging(replay_bytes_);
  make_demux();
  // Everything it wrote so far, then (while it runs) what it writes on; a
  // stopped container's output ends with its log.
  attach(std::string{"logs=1&stdout=1&stderr=1&stream="} +
         (state->running ? "1" : "0"));
}

} // namespace tasksup::runtime::detail
