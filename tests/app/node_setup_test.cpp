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

namespace {

/// True unless `dir` is on an ext2/3/4 file system without FS_TOPDIR_FL
/// (elsewhere the flag is not kept: nothing to check).
bool top_flag_where_kept(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  int flags = 0;
  struct statfs st {};
  bool ok = true;
  if (::fstatfs(fd, &st) == 0 && st.f_type == 0xEF53) {
    REQUIRE(::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0);
    ok = (flags & FS_TOPDIR_FL) != 0;
  }
  ::close(fd);
  return ok;
}

} // namespace

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
  CHECK(top_flag_where_kept(base));
  fs::remove_all(scratch);
}

TEST_CASE("a node's attempts directory is created and marked as a top "
          "directory where the file system keeps the flag") {
  namespace fs = std::filesystem;
  std::string scratch = (fs::temp_directory_path() / "tasksup-nstest-XXXXXX");
  REQUIRE(::mkdtemp(scratch.data()) != nullptr);
  auto dir = scratch + "/state/attempts";
  tasksup::runtime::make_top_directory(dir);
  CHECK(fs::is_directory(dir));
  CHECK(top_flag_where_kept(dir));
  // Again: nothing changes, nothing fails.
  tasksup::runtime::make_top_directory(dir);
  CHECK(top_flag_where_kept(dir));
  fs::remove_all(scratch);
}
