#include "node_setup.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

using namespace tasksup;

TEST_CASE("a fresh work dir lies in $TMPDIR/tasksup, which is created and, "
          "where the file system keeps inode flags, marked as a top "
          "directory") {
  namespace fs = std::filesystem;
  std::string scratch = (fs::temp_directory_path() / "tasksup-nstest-XXXXXX");
  REQUIRE(::mkdtemp(scratch.data()) != nullptr);
  const char* old = std::getenv("TMPDIR");
  std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", scratch.c_str(), 1);
  auto dir = app::fresh_work_dir("run");
  if (old != nullptr)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  auto base = scratch + "/tasksup";
  CHECK(dir.rfind(base + "/run-", 0) == 0);
  CHECK(fs::is_directory(base));
  CHECK_FALSE(fs::exists(dir)); // the runtime creates it with the attempts
  int fd = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  int flags = 0;
  struct statfs st {};
  // Only the ext2/3/4 family keeps the flag; elsewhere there is nothing to
  // check.
  if (::fstatfs(fd, &st) == 0 && st.f_type == 0xEF53) {
    REQUIRE(::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0);
    CHECK((flags & FS_TOPDIR_FL) != 0);
  }
  ::close(fd);
  fs::remove_all(scratch);
}
