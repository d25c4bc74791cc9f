#include "tasksup/runtime/process_runtime.hpp"

#include "process_reactor.hpp"

#include <memory>
#include <utility>

namespace tasksup::runtime {

namespace {

class process_runtime : public container_runtime {
public:
  explicit process_runtime(process_runtime_options options)
    : reactor_(std::make_shared<detail::reactor>(std::move(options))) {
    reactor_->init();
  }

  ~process_runtime() override { reactor_->shutdown(); }

  std::string_view name() const noexcept override { return "process"; }

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb) override {
    return reactor_->start(std::move(spec), std::move(cb));
  }

  std::shared_ptr<attempt_handle> adopt(adopt_spec spec,
                                        attempt_callbacks cb) override {
    return reactor_->adopt(std::move(spec), std::move(cb));
  }

  reap_report reap(const reap_spec& spec) override {
    return reactor_->reap(spec);
  }

private:
  std::shared_ptr<detail::reactor> reactor_;
};

} // namespace

std::shared_ptr<container_runtime>
make_process_runtime(process_runtime_options options) {
  return std::make_shared<process_runtime>(std::move(options));
}

} // namespace tasksup::runtime
