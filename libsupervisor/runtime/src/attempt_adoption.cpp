#include "attempt_adoption.hpp"

#include "attempt.hpp"
#include "attempt_reaper.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <optional>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

log_follower::~log_follower() {
  close_fd(log_fd_);
  close_fd(index_fd_);
}

void log_follower::open(const std::string& dir) {
  dir_ = dir;
  auto log_path = dir + "/output.log";
  log_fd_ = ::open(log_path.c_str(), O_RDONLY | O_CLOEXEC);
  auto index_path = dir + "/" + std::string{stream_index_name};
  index_fd_ = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
}

log_follower::result log_follower::follow(output_capture& capture,
                                          bool stop_when_full,
                                          std::vector<char>& buffer,
                                          warning_sink& warn) {
  if (!ready())
    return result::done;
  char buf[4096];
  for (;;) {
    auto n = ::read(index_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    auto segs = index_.feed({buf, static_cast<std::size_t>(n)},
                            dir_ + "/" + std::string{stream_index_name});
    if (!segs) {
      warn("process runtime: " + segs.error().to_string() +
           "; the rest of the attempt's output is not followed");
      close_fd(index_fd_);
      segments_.clear();
      return result::done;
    }
    segments_.insert(segments_.end(), segs->begin(), segs->end());
  }
  while (!segments_.empty()) {
    auto& seg = segments_.front();
    if (seg.bytes == 0) {
      segments_.pop_front();
      continue;
    }
    auto want = static_cast<std::size_t>(
      std::min<std::uint64_t>(seg.bytes, buffer.size()));
    auto n =
      ::pread(log_fd_, buffer.data(), want, static_cast<off_t>(log_offset_));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return result::behind; // not written yet
    auto got = static_cast<std::size_t>(n);
    log_offset_ += got;
    seg.bytes -= got;
    if (seg.kind != 'n')
      capture.feed(seg.kind == 'e' ? output_stream::err : output_stream::out,
                   {buffer.data(), got});
    if (stop_when_full && capture.full())
      return result::full;
  }
  return result::done;
}

void adopt_attempt(attempt& a, const adopt_spec& spec,
                   output_capture::line_callback sink,
                   const output_capture_limits& limits, attempt_reaper& reaper,
                   warning_sink& warn) {
  a.adopted = true;
  a.argv0 = spec.agent_id;
  auto dir = shim_dir_of(spec.attempt_dir);
  a.attempt_dir = dir;
  a.artifacts_dir = dir + "/artifacts";
  a.log_path = dir + "/output.log";
  auto not_adopted = [&](std::string why) {
    a.never_ran("node restarted and the attempt could not be adopted: " +
                std::move(why));
    a.pid = -1;
    close_fd(a.pidfd);
  };
  if (spec.attempt_dir.empty())
    return not_adopted("no attempt directory was given");
  auto cap = output_capture::create({}, std::move(sink), limits);
  if (!cap)
    return not_adopted(cap.error().to_string());
  a.capture.emplace(std::move(*cap));
  // The output so far rebuilds the tail; only later lines are delivered.
  a.log.open(dir);
  // Not the reactor's buffer: this runs on the caller's thread.
  std::vector<char> buf(64 * 1024);
  a.delivering = false;
  a.log.follow(*a.capture, false, buf, warn);

  auto exit_path = dir + "/" + std::string{exit_record_name};
  auto shim_path = dir + "/" + std::string{shim_record_name};
  // Empty when the attempt's end is recorded (then it is reported), a
  // problem when the record is unusable, nothing when there is none.
  auto take_exit = [&]() -> std::optional<std::string> {
    auto text = read_small_file(exit_path);
    if (!text)
      return text.error().path == "missing"
               ? std::optional<std::string>{}
               : std::optional<std::string>{text.error().to_string()};
    auto rec = parse_exit_record(*text, exit_path);
    if (!rec)
      return rec.error().to_string();
    a.record = std::move(*rec);
    return std::string{};
  };
  auto finished = [&] {
    a.exited = true;
    a.ended = clock_type::now();
    // The log is complete: read what the replay left (all of it was
    // written before the adoption, so none of it is delivered).
    a.log.follow(*a.capture, false, buf, warn);
    a.eof = true;
  };

  auto shim = read_small_file(shim_path);
  std::optional<shim_record> rec;
  std::string shim_problem;
  if (shim) {
    auto parsed = parse_shim_record(*shim, shim_path);
    if (parsed)
      rec = std::move(*parsed);
    else
      shim_problem = parsed.error().to_string();
  } else {
    shim_problem = shim.error().to_string();
  }
  if (rec && !rec->cgroup.empty()) {
    if (auto cg = reaper.recorded_cgroup(
          rec->cgroup, cgroup_name_for(spec.task_id, spec.attempt)))
      a.cgroup.emplace(std::move(*cg));
  }

  if (auto bad = take_exit()) {
    if (bad->empty())
      return finished();
    if (rec && is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      // A live shim with a corrupt exit record is not ours to believe.
      int fd = pidfd_open(rec->shim_pid);
      if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir))
        pidfd_signal(fd, SIGKILL);
      if (fd >= 0)
        ::close(fd);
    }
    if (rec)
      kill_group_members(rec->agent_pgid, rec->agent_start, dir);
    if (a.cgroup)
      a.cgroup->kill_all();
    return not_adopted(*bad);
  }
  if (!rec)
    return not_adopted("no usable shim record (" + shim_problem +
                       "), so nothing of it can be found or killed");
  if (!spec.runtime_id.empty() &&
      spec.runtime_id != std::to_string(rec->agent_pid))
    return not_adopted(shim_path + " names agent pid " +
                       std::to_string(rec->agent_pid) + ", not " +
                       spec.runtime_id);
  if (is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
    // The pidfd names the process we checked only if the check still holds
    // once it is open.
    int fd = pidfd_open(rec->shim_pid);
    if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      a.pid = rec->shim_pid;
      a.pidfd = fd;
      a.agent_pid = rec->agent_pid;
      a.delivering = true;
      if (!a.log.ready())
        warn("process runtime: adopted attempt in " + dir +
             " has no readable output.log or output.streams; its output "
             "from now on is only in its shim's log");
      return;
    }
    if (fd >= 0)
      ::close(fd);
  }
  // The shim is gone; it may have recorded the end just now.
  if (auto bad = take_exit(); bad && bad->empty())
    return finished();
  auto killed = kill_group_members(rec->agent_pgid, rec->agent_start, dir);
  if (a.cgroup)
    a.cgroup->kill_all();
  not_adopted("its shim (pid " + std::to_string(rec->shim_pid) +
              ") is gone and recorded no exit" +
              (killed > 0 ? "; killed " + std::to_string(killed) +
                              " processes left in its group " +
                              std::to_string(rec->agent_pgid)
                          : std::string{}));
}

} // namespace tasksup::runtime::detail
