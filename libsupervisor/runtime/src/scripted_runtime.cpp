#include "tasksup/runtime/scripted_runtime.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace tasksup::runtime {

namespace {

constexpr int sigterm = 15;
constexpr int sigkill = 9;

} // namespace

struct scripted_runtime::shared {
  mutable std::mutex mtx;
  timer_fn timer;
  std::map<std::string, std::vector<scripted_step>> by_agent;
  std::map<std::pair<std::string, std::string>, std::vector<scripted_step>>
    by_task_agent;
  /// Attempts played so far per (task, agent), to pick the next step.
  std::map<std::pair<std::string, std::string>, std::size_t> played;
  std::map<std::string, std::size_t> started_per_task;
  std::vector<scripted_call> calls;
  std::size_t started = 0;
  std::size_t running = 0;
  std::size_t max_running = 0;
  std::size_t next_id = 1;

  void record(scripted_call call) { calls.push_back(std::move(call)); }
};

namespace {

/// One running scripted attempt. Whoever flips `done_` first (the timer, a
/// stop or a kill) delivers the exit; the others do nothing.
class scripted_attempt : public attempt_handle,
                         public std::enable_shared_from_this<scripted_attempt> {
public:
  scripted_attempt(std::shared_ptr<scripted_runtime::shared> sh,
                   attempt_spec spec, attempt_callbacks cb, scripted_step step,
                   std::string id)
    : shared_(std::move(sh)), spec_(std::move(spec)), cb_(std::move(cb)),
      step_(std::move(step)), id_(std::move(id)) {}

  void stop(std::chrono::milliseconds grace) override {
    record(scripted_call::kind::stop, grace);
    finish(143, sigterm, false);
  }

  void kill() override {
    record(scripted_call::kind::kill, std::chrono::milliseconds{0});
    finish(137, sigkill, false);
  }

  std::string id() const override { return id_; }

  /// Ends the attempt as scripted (called by the timer or at once).
  void finish_as_scripted() {
    finish(step_.exit_code, step_.signal, step_.oom_killed);
  }

  void finish(int exit_code, int signal, bool oom) {
    attempt_callbacks cb;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (done_)
        return;
      done_ = true;
      cb = std::move(cb_);
    }
    {
      std::lock_guard<std::mutex> guard{shared_->mtx};
      --shared_->running;
    }
    attempt_outcome out;
    out.exit_code = exit_code;
    out.signal = signal;
    out.oom_killed = oom;
    auto first = step_.lines.size() > outcome_tail_lines
                   ? step_.lines.end() - static_cast<long>(outcome_tail_lines)
                   : step_.lines.begin();
    out.tail.assign(first, step_.lines.end());
    out.duration_s = step_.duration_s;
    out.artifacts = step_.artifacts;
    out.infrastructure_error = step_.infrastructure_error;
    out.started = step_.started;
    out.retry_futile = step_.retry_futile;
    if (cb.on_exit)
      cb.on_exit(std::move(out));
  }

  /// Delivers the scripted output (before any exit).
  void emit_lines() {
    attempt_callbacks* cb = nullptr;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (done_)
        return;
      cb = &cb_;
    }
    if (cb->on_line)
      for (auto& line : step_.lines)
        cb->on_line(output_stream::out, line);
  }

private:
  /// Records a stop or kill that reaches a running attempt; like a real
  /// runtime's, a call after the attempt ended does nothing.
  void record(scripted_call::kind what, std::chrono::milliseconds grace) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (done_)
        return;
    }
    scripted_call call;
    call.what = what;
    call.task_id = spec_.task_id;
    call.attempt = spec_.attempt;
    call.agent_id = spec_.agent_id;
    call.grace = grace;
    std::lock_guard<std::mutex> guard{shared_->mtx};
    shared_->record(std::move(call));
  }

  std::shared_ptr<scripted_runtime::shared> shared_;
  attempt_spec spec_;
  std::mutex mtx_;
  bool done_ = false;
  attempt_callbacks cb_;
  scripted_step step_;
  std::string id_;
};

} // namespace

scripted_runtime::scripted_runtime(timer_fn timer)
  : shared_(std::make_shared<shared>()) {
  shared_->timer = std::move(timer);
}

scripted_runtime::~scripted_runtime() = default;

void scripted_runtime::set_timer(timer_fn timer) {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  shared_->timer = std::move(timer);
}

void scripted_runtime::script(const std::string& agent_id,
                              std::vector<scripted_step> steps) {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  shared_->by_agent[agent_id] = std::move(steps);
}

void scripted_runtime::script(const std::string& task_id,
                              const std::string& agent_id,
                              std::vector<scripted_step> steps) {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  shared_->by_task_agent[{task_id, agent_id}] = std::move(steps);
}

std::string_view scripted_runtime::name() const noexcept {
  return "scripted";
}

std::shared_ptr<attempt_handle> scripted_runtime::start(attempt_spec spec,
                                                        attempt_callbacks cb) {
  scripted_step step;
  timer_fn timer;
  std::string id;
  {
    std::lock_guard<std::mutex> guard{shared_->mtx};
    auto key = std::make_pair(spec.task_id, spec.agent_id);
    auto index = shared_->played[key]++;
    const std::vector<scripted_step>* steps = nullptr;
    if (auto i = shared_->by_task_agent.find(key);
        i != shared_->by_task_agent.end())
      steps = &i->second;
    else if (auto j = shared_->by_agent.find(spec.agent_id);
             j != shared_->by_agent.end())
      steps = &j->second;
    if (steps != nullptr && !steps->empty())
      step = (*steps)[std::min(index, steps->size() - 1)];
    scripted_call call;
    call.what = scripted_call::kind::start;
    call.task_id = spec.task_id;
    call.attempt = spec.attempt;
    call.agent_id = spec.agent_id;
    call.spec = spec;
    shared_->record(std::move(call));
    if (step.throw_on_start)
      throw std::runtime_error("scripted runtime: start failed on purpose");
    ++shared_->started;
    ++shared_->started_per_task[spec.task_id];
    ++shared_->running;
    shared_->max_running = std::max(shared_->max_running, shared_->running);
    id = "scripted-" + std::to_string(shared_->next_id++);
    timer = shared_->timer;
  }
  auto hang = step.hang;
  auto duration = step.duration_s;
  auto attempt = std::make_shared<scripted_attempt>(
    shared_, std::move(spec), std::move(cb), std::move(step), std::move(id));
  attempt->emit_lines();
  if (!hang) {
    if (timer && duration > 0) {
      // The timer holds the attempt alive until it fires.
      timer(duration, [attempt] { attempt->finish_as_scripted(); });
    } else {
      attempt->finish_as_scripted();
    }
  }
  return attempt;
}

std::vector<scripted_call> scripted_runtime::calls() const {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  return shared_->calls;
}

std::size_t scripted_runtime::started() const {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  return shared_->started;
}

std::size_t scripted_runtime::started(const std::string& task_id) const {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  auto i = shared_->started_per_task.find(task_id);
  return i == shared_->started_per_task.end() ? 0 : i->second;
}

std::size_t scripted_runtime::running() const {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  return shared_->running;
}

std::size_t scripted_runtime::max_running() const {
  std::lock_guard<std::mutex> guard{shared_->mtx};
  return shared_->max_running;
}

} // namespace tasksup::runtime
