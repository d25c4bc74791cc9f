#include "tasksup/actors/shared_pool.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace tasksup;

namespace {

using string_pool =
  shared_pool<std::string, std::hash<std::string>, std::equal_to<std::string>>;

/// Every value lands in the same bucket: lookups must compare, not trust
/// the hash.
struct one_hash {
  std::size_t operator()(const std::string&) const { return 7; }
};

} // namespace

TEST_CASE("equal values share one copy, different ones get their own") {
  string_pool pool;
  auto a = pool.share("defaults");
  auto b = pool.share("defaults");
  auto c = pool.share("overrides");
  CHECK(a == b);
  CHECK(*a == "defaults");
  CHECK(c != a);
  CHECK(*c == "overrides");
  CHECK(pool.size() == 2);
}

TEST_CASE("colliding hashes still tell values apart") {
  shared_pool<std::string, one_hash, std::equal_to<std::string>> pool;
  auto a = pool.share("a");
  auto b = pool.share("b");
  CHECK(*a == "a");
  CHECK(*b == "b");
  CHECK(pool.share("a") == a);
  CHECK(pool.share("b") == b);
}

TEST_CASE("a value is forgotten once its last user lets go") {
  string_pool pool;
  auto first = pool.share("settings");
  const std::string* address = first.get();
  auto second = pool.share("settings");
  first.reset();
  CHECK(pool.size() == 1); // still held by `second`
  CHECK(pool.share("settings").get() == address);
  second.reset();
  CHECK(pool.size() == 0);
  auto again = pool.share("settings");
  CHECK(*again == "settings");
  CHECK(pool.size() == 1);
}

TEST_CASE("the table stays proportional to the values in use") {
  string_pool pool;
  auto kept = pool.share("kept");
  for (int i = 0; i < 10000; ++i)
    pool.share("task-" + std::to_string(i)); // each dropped at once
  CHECK(pool.size() == 1);
  CHECK(pool.entries() <= 2 * 64);
  CHECK(pool.share("kept") == kept);
}

TEST_CASE("threads sharing the same values get the same copies") {
  string_pool pool;
  constexpr int threads = 4;
  constexpr int rounds = 2000;
  std::vector<std::vector<std::shared_ptr<const std::string>>> got(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&pool, &out = got[t]] {
      for (int i = 0; i < rounds; ++i)
        out.push_back(pool.share("value-" + std::to_string(i % 10)));
    });
  for (auto& w : workers)
    w.join();
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < rounds; ++i) {
      CHECK(*got[t][i] == "value-" + std::to_string(i % 10));
      REQUIRE(got[t][i] == got[0][i % 10]);
    }
  CHECK(pool.size() == 10);
}
