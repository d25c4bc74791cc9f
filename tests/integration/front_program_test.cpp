// The tasksup program users run starts without the actor system: it links
// no CAF, OpenSSL or spdlog (the build's layer check keeps their headers out
// of its sources; this checks what the dynamic loader is asked to load).

#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <string>

namespace {

/// The shared libraries the dynamic section of `program` names (NEEDED).
std::string needed_libraries(const std::string& program) {
  std::string cmd = "readelf -d '" + program + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe{::popen(cmd.c_str(), "r"),
                                             ::pclose};
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, pipe.get()))
    out.append(buf, n);
  return out;
}

} // namespace

TEST_CASE("the tasksup program loads no CAF, OpenSSL or spdlog") {
  auto needed = needed_libraries(TASKSUP_BINARY);
  INFO(needed);
  // A dynamic executable (else the check below would pass on nothing).
  REQUIRE(needed.find("(NEEDED)") != std::string::npos);
  REQUIRE(needed.find("libc.so") != std::string::npos);
  CHECK(needed.find("libcaf") == std::string::npos);
  CHECK(needed.find("libssl") == std::string::npos);
  CHECK(needed.find("libcrypto") == std::string::npos);
  CHECK(needed.find("libspdlog") == std::string::npos);
}
