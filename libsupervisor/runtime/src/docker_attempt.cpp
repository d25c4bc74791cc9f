// One docker attempt: create, start, stream logs, wait, inspect, collect
// artifacts, remove — a chain of asynchronous engine requests on the
// runtime's I/O thread — and the handle the supervisor holds (adoption:
// docker_adopt.cpp).

#include "docker_attempt.hpp"

#include "tasksup/runtime/detail/docker_api.hpp"
#include "tasksup/runtime/detail/docker_log_demux.hpp"
#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/private_files.hpp"

#include <boost/asio/post.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace {

namespace fs = std::filesystem;
using detail::engine_exchange;

constexpr int sigkill = 9;
constexpr int sigterm = 15;

/// True when a 404 body blames the image (not, say, a missing network).
bool mentions_image(std::string_view body) {
  auto text = detail::docker_error_message(404, body);
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return text.find("image") != std::string::npos;
}

} // namespace

void docker_attempt::begin() {
  phase_ = phase::creating;
  // Named by `start`, so `attempt_started` can name the container before
  // the engine has answered the create.
  name_ = id_->get();
  watch_memory();
  auto body = detail::docker_create_body(
    spec_, core_->options,
    memory_watch_ ? memory_watch_->cgroup_parent() : std::string{});
  if (!body) {
    fail(body.error().to_string());
    complete();
    return;
  }
  auto root = fs::path{spec_.attempt_dir};
  // Private like the process runtime's: the log and the artifacts are the
  // node user's only (a container running as root still reads them).
  for (auto* sub : {"workspace", "artifacts"}) {
    if (auto err = make_private_dirs((root / sub).string()); !err.empty()) {
      fail(err);
      complete();
      return;
    }
  }
  // The task's state directory: made on its first attempt, then kept.
  if (!spec_.state_dir.empty())
    if (auto err = make_private_dirs(spec_.state_dir); !err.empty()) {
      fail(err);
      complete();
      return;
    }
  auto capture = output_capture::create(
    (root / "output.log").string(),
    [this](output_stream stream, std::string_view line) {
      return cb_.on_line ? cb_.on_line(stream, line) : true;
    },
    core_->options.output_limits);
  if (!capture) {
    fail(capture.error().to_string());
    complete();
    return;
  }
  capture_.emplace(std::move(*capture));
  if (!spec_.feedback.empty()) {
    auto path = (root / std::string{feedback_file_name}).string();
    if (auto err = detail::write_file_atomically(path, spec_.feedback);
        !err.empty()) {
      fail("cannot write the feedback file: " + err);
      complete();
      return;
    }
  }
  make_demux();
  step_ = request(verb::post, "/containers/create?name=" + name_,
                  std::move(*body), core_->options.request_timeout,
                  [](docker_attempt& self, engine_response resp) {
                    self.on_created(std::move(resp));
                  });
}

/// The attempt's memory limit on a cgroup of its own, when the engine
/// allows it (else the container's own limit holds).
void docker_attempt::watch_memory() {
  constexpr std::uint64_t mib = 1024 * 1024;
  constexpr auto most =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / mib;
  auto mb = spec_.memory_limit_mb.value_or(0);
  if (mb == 0 || mb > most)
    return;
  if (auto* home = core_->memory_home())
    if (auto w = detail::docker_memory_watch::create(*home, name_, mb * mib))
      memory_watch_.emplace(std::move(*w));
}

void docker_attempt::request_stop(std::chrono::milliseconds grace) {
  if (requested_ != user_request::none)
    return;
  requested_ = user_request::stop;
  grace_ = std::max(grace, std::chrono::milliseconds{0});
  if (phase_ == phase::running)
    send_stop();
}

/// The receiver of lines caught up.
void docker_attempt::resume_output() {
  if (!capture_)
    return;
  capture_->resume();
  if (output_)
    output_->resume();
}

void docker_attempt::request_kill() {
  // Whoever kills no longer waits for lines: drain, so the attempt ends.
  resume_output();
  if (requested_ == user_request::kill)
    return;
  requested_ = user_request::kill;
  if (phase_ == phase::running)
    send_kill();
}

/// The runtime is being destroyed: kill and remove the container.
void docker_attempt::shut_down() {
  if (phase_ == phase::collecting || phase_ == phase::removing)
    return; // the outcome is known; removal is under way
  fail("the docker runtime shut down during the attempt");
  request_kill();
}

/// Gives up at once, leaving whatever the engine still holds.
void docker_attempt::abandon(const std::string& why) {
  if (phase_ == phase::done)
    return;
  // Only a container the engine created can remain (the handle's id holds
  // the planned name from the start).
  fail(why + (container_id_.empty()
                ? std::string{}
                : "; container " + container_id_ + " may remain"));
  complete();
}

/// The container runs (or ran, when adopted after its end): wait for it.
void docker_attempt::running() {
  phase_ = phase::running;
  started_at_ = clock_type::now();
  wait_ = request(verb::post, container_path() + "/wait", {},
                  std::chrono::milliseconds{0},
                  [](docker_attempt& self, engine_response resp) {
                    self.on_waited(std::move(resp));
                  });
  if (requested_ == user_request::kill)
    send_kill();
  else if (requested_ == user_request::stop)
    send_stop();
}

/// Sends one request whose answer goes to `handler` unless the attempt is
/// done by then.
std::shared_ptr<engine_exchange>
docker_attempt::request(verb method, std::string target, std::string body,
                        std::chrono::milliseconds timeout,
                        step_handler handler) {
  return detail::async_engine_request(
    core_->io, core_->endpoint, method, std::move(target), std::move(body),
    timeout, [self = shared_from_this(), handler](engine_response resp) {
      if (self->phase_ != phase::done)
        handler(*self, std::move(resp));
    });
}

/// Records the first infrastructure failure; later ones are consequences.
void docker_attempt::fail(std::string text) {
  if (infra_error_.empty())
    infra_error_ = std::move(text);
}

std::string docker_attempt::engine_text(const engine_response& resp) const {
  if (!resp.transport_error.empty())
    return resp.transport_error;
  return detail::docker_error_message(resp.status, resp.body) + " (HTTP " +
         std::to_string(resp.status) + ")";
}

std::string docker_attempt::container_path() const {
  return "/containers/" + (container_id_.empty() ? name_ : container_id_);
}

void docker_attempt::on_created(engine_response resp) {
  if (!resp.transport_error.empty()) {
    // The engine may have created it before the exchange broke.
    fail("docker create failed: " + resp.transport_error);
    remove();
    return;
  }
  if (resp.status == 404 && mentions_image(resp.body)) {
    fail("image " + spec_.image + " not found locally (tasksup never pulls): " +
         detail::docker_error_message(resp.status, resp.body));
    retry_futile_ = true;
    complete();
    return;
  }
  if (!resp.ok()) {
    fail("docker create failed: " + engine_text(resp));
    complete();
    return;
  }
  auto id = detail::parse_docker_create_response(resp.body);
  if (!id) {
    fail(id.error().to_string());
    remove();
    return;
  }
  container_id_ = std::move(*id);
  id_->set(container_id_);
  if (requested_ != user_request::none) {
    end_unstarted();
    return;
  }
  // Attach before start, as `docker run` does: the attach stream carries
  // every byte the container writes, including a last unterminated line
  // that a followed log stream can miss when the container exits.
  attach("stream=1&stdout=1&stderr=1");
}

void docker_attempt::attach(const std::string& query) {
  phase_ = phase::starting;
  output_ = detail::async_engine_attach(
    core_->io, core_->endpoint, container_path() + "/attach?" + query,
    [self = shared_from_this()] {
      if (self->phase_ != phase::done)
        self->on_attached();
    },
    [self = shared_from_this()](std::string_view bytes) {
      self->on_output_bytes(bytes);
    },
    [self = shared_from_this()](engine_response resp) {
      if (self->phase_ != phase::done)
        self->on_output_end(std::move(resp));
    });
}

/// Stopped or killed before it ran: it is never started.
void docker_attempt::end_unstarted() {
  signal_ = requested_ == user_request::kill ? sigkill : sigterm;
  exit_code_ = 128 + signal_;
  remove();
}

void docker_attempt::on_attached() {
  attached_ = true;
  if (adopting_) {
    running();
    return;
  }
  if (requested_ != user_request::none) {
    end_unstarted();
    return;
  }
  step_ = request(verb::post, container_path() + "/start", {},
                  core_->options.request_timeout,
                  [](docker_attempt& self, engine_response resp) {
                    self.on_started(std::move(resp));
                  });
}

void docker_attempt::on_started(engine_response resp) {
  if (!resp.ok() && resp.status != 304) {
    start_error_ = engine_text(resp);
    if (!resp.transport_error.empty()) {
      fail("docker start failed: " + start_error_);
      remove();
      return;
    }
    // The engine could not exec the command: inspect tells 126/127
    // (agent missing or not executable) from other failures.
    phase_ = phase::collecting;
    inspect();
    return;
  }
  running();
}

void docker_attempt::send_stop() {
  auto secs = (grace_.count() + 999) / 1000;
  controls_.push_back(
    request(verb::post, container_path() + "/stop?t=" + std::to_string(secs),
            {}, core_->options.request_timeout + std::chrono::seconds{secs},
            [](docker_attempt&, engine_response) {
              // 304 (already stopped) and errors alike: wait reports the end.
            }));
}

void docker_attempt::send_kill() {
  controls_.push_back(request(verb::post, container_path() + "/kill", {},
                              core_->options.request_timeout,
                              [](docker_attempt&, engine_response) {}));
}

void docker_attempt::on_output_bytes(std::string_view bytes) {
  if (phase_ == phase::done || output_done_)
    return;
  if (!demux_->feed(bytes)) {
    fail(demux_->error());
    end_output();
    return;
  }
  // The receiver is behind: stop reading the attach stream until it asks.
  if (capture_->full() && output_)
    output_->pause();
}

void docker_attempt::on_output_end(engine_response resp) {
  if (output_done_)
    return;
  output_done_ = true;
  output_.reset();
  if (!attached_) {
    fail("docker attach failed: " + engine_text(resp));
    remove();
    return;
  }
  if (!resp.transport_error.empty())
    fail("the container's output stream failed: " + resp.transport_error);
  end_output();
}

void docker_attempt::end_output() {
  output_done_ = true;
  if (output_) {
    output_->cancel();
    output_.reset();
  }
  maybe_collect();
}

void docker_attempt::on_waited(engine_response resp) {
  wait_done_ = true;
  wait_.reset();
  ended_at_ = clock_type::now();
  if (!resp.ok()) {
    fail("lost the Docker engine while waiting for the container: " +
         engine_text(resp));
  } else if (auto status = detail::parse_docker_wait(resp.body)) {
    exit_code_ = *status;
  } else {
    fail(status.error().to_string());
  }
  if (!output_done_) {
    // The output stream ends with the container; bound how long it may
    // lag behind.
    drain_timer_.expires_after(core_->options.output_drain_timeout);
    drain_timer_.async_wait(
      [self = shared_from_this()](boost::system::error_code ec) {
        if (!ec && self->phase_ == phase::running)
          self->end_output();
      });
  }
  maybe_collect();
}

void docker_attempt::maybe_collect() {
  if (phase_ != phase::running || !wait_done_ || !output_done_)
    return;
  drain_timer_.cancel();
  phase_ = phase::collecting;
  inspect();
}

void docker_attempt::inspect() {
  step_ = request(verb::get, container_path() + "/json", {},
                  core_->options.request_timeout,
                  [](docker_attempt& self, engine_response resp) {
                    self.on_inspected(std::move(resp));
                  });
}

void docker_attempt::on_inspected(engine_response resp) {
  std::optional<detail::docker_container_state> state;
  std::string inspect_error;
  if (!resp.ok()) {
    inspect_error = "docker inspect failed: " + engine_text(resp);
  } else if (auto parsed = detail::parse_docker_inspect(resp.body)) {
    state = std::move(*parsed);
  } else {
    inspect_error = parsed.error().to_string();
  }
  if (!start_error_.empty()) {
    if (state && (state->exit_code == 126 || state->exit_code == 127)) {
      // The agent is missing or not executable: shown to the classifier
      // like a shell's "not found" message, with the engine's exit code.
      capture_->feed("docker: " + start_error_ + "\n");
    } else {
      fail("docker start failed: " + start_error_);
    }
  }
  // The kernel told this process itself (the limit is on a cgroup of its
  // own, watched before the container started).
  if (state && memory_watch_ && memory_watch_->oom_killed())
    state->oom_killed = true;
  // Else the engine's word. It answers `wait` once it has handled the
  // container's exit; the kernel's OOM event reaches it separately and may
  // be handled later (seen on a freshly started engine: exit 137,
  // OOMKilled false, then true). A SIGKILL under a memory limit that
  // nobody here asked for is looked at again until the engine agrees or
  // the settle time is over.
  if (state && !memory_watch_ && !state->oom_killed &&
      state->exit_code == 128 + sigkill && spec_.memory_limit_mb &&
      requested_ == user_request::none && start_error_.empty() &&
      core_->options.oom_settle_timeout.count() > 0) {
    auto now = clock_type::now();
    if (!settle_until_)
      settle_until_ = now + core_->options.oom_settle_timeout;
    if (now < *settle_until_) {
      drain_timer_.expires_after(std::chrono::milliseconds{50});
      drain_timer_.async_wait(
        [self = shared_from_this()](boost::system::error_code ec) {
          if (!ec && self->phase_ == phase::collecting)
            self->inspect();
        });
      return;
    }
  }
  if (state) {
    exit_code_ = state->exit_code;
    oom_killed_ = state->oom_killed;
  } else {
    fail(std::move(inspect_error));
  }
  collect_artifacts();
  remove();
}

void docker_attempt::collect_artifacts() {
  auto dir = fs::path{spec_.attempt_dir} / "artifacts";
  std::error_code ec;
  fs::recursive_directory_iterator it{
    dir, fs::directory_options::skip_permission_denied, ec};
  for (; !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    // Regular files only: a symlink made inside the container may point
    // anywhere on the host.
    std::error_code sec;
    if (it->symlink_status(sec).type() != fs::file_type::regular)
      continue;
    artifacts_.push_back(it->path().string());
    if (artifacts_.size() >= core_->options.max_artifacts)
      break;
  }
  std::sort(artifacts_.begin(), artifacts_.end());
}

void docker_attempt::remove() {
  phase_ = phase::removing;
  step_ = request(verb::delete_, container_path() + "?force=1&v=1", {},
                  core_->options.request_timeout,
                  [](docker_attempt& self, engine_response) {
                    // A container left behind is found again by its
                    // labels (list_docker_containers).
                    self.complete();
                  });
}

void docker_attempt::complete() {
  if (phase_ == phase::done)
    return;
  phase_ = phase::done;
  complete_now();
}

void docker_attempt::complete_now() {
  drain_timer_.cancel();
  // The container is removed (or could not be): its cgroup goes too, and
  // stays only while something still runs in it.
  if (memory_watch_)
    memory_watch_->remove();
  for (auto* ex : {&step_, &wait_, &output_})
    if (*ex) {
      (*ex)->cancel();
      ex->reset();
    }
  for (auto& ex : controls_)
    ex->cancel();
  controls_.clear();
  attempt_outcome out;
  out.exit_code = exit_code_;
  out.oom_killed = oom_killed_;
  // The engine reports a signal death as 128+N, like a shell.
  if (signal_ != 0)
    out.signal = signal_;
  else if (exit_code_ > 128 && exit_code_ < 128 + 65)
    out.signal = exit_code_ - 128;
  if (started_at_) {
    auto end = ended_at_.value_or(clock_type::now());
    out.duration_s = std::chrono::duration<double>(end - *started_at_).count();
  }
  if (capture_) {
    capture_->finish();
    if (auto text = capture_->summary(); !text.empty() && cb_.on_notice)
      cb_.on_notice(text);
    out.tail = capture_->tail();
    out.log_path = capture_->log_path();
  }
  out.artifacts = std::move(artifacts_);
  out.infrastructure_error = std::move(infra_error_);
  out.started = started_at_.has_value() || adopting_;
  out.retry_futile = retry_futile_;
  auto on_exit = std::move(cb_.on_exit);
  cb_ = {};
  auto core = core_;
  // Keep this alive through the callback even after the core forgets it.
  auto self = shared_from_this();
  core->attempt_finished(this);
  if (on_exit)
    on_exit(std::move(out));
}

void docker_core::begin_shutdown() {
  shutting_down = true;
  if (live.empty()) {
    guard.reset();
    return;
  }
  // Copy: shut_down may complete attempts, which erases them from `live`.
  auto attempts = live;
  for (auto& [ptr, attempt] : attempts)
    attempt->shut_down();
  shutdown_timer.expires_after(options.shutdown_timeout);
  shutdown_timer.async_wait([this](boost::system::error_code ec) {
    if (ec)
      return;
    auto rest = live;
    for (auto& [ptr, attempt] : rest)
      attempt->abandon("the Docker engine did not remove the container "
                       "within the shutdown timeout");
    guard.reset();
  });
}

void docker_core::attempt_finished(docker_attempt* attempt) {
  live.erase(attempt);
  if (shutting_down && live.empty()) {
    shutdown_timer.cancel();
    guard.reset();
  }
}

namespace {

class docker_handle final : public attempt_handle {
public:
  docker_handle(std::shared_ptr<docker_core> core,
                std::weak_ptr<docker_attempt> attempt,
                std::shared_ptr<id_box> id)
    : core_(std::move(core)), attempt_(std::move(attempt)), id_(std::move(id)) {
  }

  void stop(std::chrono::milliseconds grace) override {
    asio::post(core_->io, [attempt = attempt_, grace] {
      if (auto ptr = attempt.lock())
        ptr->request_stop(grace);
    });
  }

  void kill() override {
    asio::post(core_->io, [attempt = attempt_] {
      if (auto ptr = attempt.lock())
        ptr->request_kill();
    });
  }

  void resume_output() override {
    asio::post(core_->io, [attempt = attempt_] {
      if (auto ptr = attempt.lock())
        ptr->resume_output();
    });
  }

  std::string id() const override { return id_->get(); }

private:
  std::shared_ptr<docker_core> core_;
  std::weak_ptr<docker_attempt> attempt_;
  std::shared_ptr<id_box> id_;
};

} // namespace

std::shared_ptr<attempt_handle>
launch_docker_attempt(std::shared_ptr<docker_core> core, attempt_spec spec,
                      attempt_callbacks cb, std::shared_ptr<id_box> id,
                      std::optional<std::string> adopt_container) {
  auto attempt =
    std::make_shared<docker_attempt>(core, std::move(spec), std::move(cb), id);
  auto handle = std::make_shared<docker_handle>(core, attempt, id);
  asio::post(core->io, [core, attempt, container = std::move(adopt_container)] {
    core->live.emplace(attempt.get(), attempt);
    if (container)
      attempt->begin_adopt(*container);
    else
      attempt->begin();
  });
  return handle;
}

} // namespace tasksup::runtime::detail
