#include "tasksup/runtime/process_runtime.hpp"

#include "process_reactor.hpp"
#include "tasksup/runtime/private_files.hpp"

#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

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

void make_top_directory(const std::string& dir) {
  make_private_dirs(dir);
  if (int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      fd >= 0) {
    int flags = 0;
    if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
        (flags & FS_TOPDIR_FL) == 0) {
      flags |= FS_TOPDIR_FL;
      ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    ::close(fd);
  }
}

} // namespace tasksup::runtime
