#pragma once

// The tests' PostgreSQL server (scripts/postgres-test.sh, started by ctest's
// `postgres` fixture) and a fresh database on it for one test, dropped at
// scope exit. Tests that use it carry the tag [postgres], which makes ctest
// start the server first.

#include <catch2/catch.hpp>

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>

namespace tasksup::test {

/// The server's URL (its `postgres` database).
inline std::string postgres_server_url() {
  std::ifstream in{std::string{TASKSUP_TEST_POSTGRES_DIR} + "/url"};
  std::string url;
  std::getline(in, url);
  if (url.empty())
    FAIL("no PostgreSQL server for the tests: ctest starts one (fixture "
         "postgres), or run scripts/postgres-test.sh "
         "start " TASKSUP_TEST_POSTGRES_DIR);
  return url;
}

/// Runs one SQL command on the server's `postgres` database.
inline void postgres_admin(const std::string& sql) {
  auto url = postgres_server_url();
  PGconn* c = PQconnectdb(url.c_str());
  INFO(PQerrorMessage(c));
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PGresult* r = PQexec(c, sql.c_str());
  INFO(sql << ": " << PQerrorMessage(c));
  auto ok = PQresultStatus(r) == PGRES_COMMAND_OK ||
            PQresultStatus(r) == PGRES_TUPLES_OK;
  PQclear(r);
  PQfinish(c);
  REQUIRE(ok);
}

/// A new, empty database for one test.
struct postgres_database {
  std::string name;
  std::string url;

  postgres_database() {
    static std::atomic<int> counter{0};
    name = "tasksup_t" + std::to_string(::getpid()) + "_" +
           std::to_string(++counter);
    postgres_admin("CREATE DATABASE " + name);
    auto server = postgres_server_url();
    url = server.substr(0, server.rfind('/') + 1) + name;
  }

  ~postgres_database() {
    try {
      postgres_admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    } catch (...) {
    }
  }

  postgres_database(const postgres_database&) = delete;
  postgres_database& operator=(const postgres_database&) = delete;
};

} // namespace tasksup::test
