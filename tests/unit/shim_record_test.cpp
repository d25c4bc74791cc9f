#include "tasksup/runtime/detail/shim_record.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

using namespace tasksup::runtime::detail;

namespace {

shim_record sample_shim() {
  shim_record r;
  r.shim_pid = 4000;
  r.shim_start = 123456;
  r.agent_pid = 4001;
  r.agent_pgid = 4001;
  r.agent_start = 123457;
  r.cgroup = "/sys/fs/cgroup/tasksup/t-1";
  return r;
}

std::string good_shim_text() {
  return format_shim_record(sample_shim());
}

std::string replace(std::string text, const std::string& from,
                    const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("shim record: what is written is read back") {
  auto parsed = parse_shim_record(good_shim_text(), "/a/shim.pid");
  REQUIRE(parsed);
  CHECK(parsed->shim_pid == 4000);
  CHECK(parsed->shim_start == 123456);
  CHECK(parsed->agent_pid == 4001);
  CHECK(parsed->agent_pgid == 4001);
  CHECK(parsed->agent_start == 123457);
  CHECK(parsed->cgroup == "/sys/fs/cgroup/tasksup/t-1");
}

TEST_CASE("shim record: truncated, corrupt or hostile content is rejected "
          "with the file and field named") {
  auto text = good_shim_text();
  auto reject = [](const std::string& content, const std::string& says) {
    auto parsed = parse_shim_record(content, "/a/shim.pid");
    REQUIRE_FALSE(parsed);
    auto msg = parsed.error().to_string();
    INFO(msg);
    CHECK(msg.find("/a/shim.pid") != std::string::npos);
    CHECK(msg.find(says) != std::string::npos);
  };
  SECTION("cut short by a crash") {
    reject(text.substr(0, text.size() - 3), "incomplete");
    reject(text.substr(0, text.find("agent_pid")), "agent_pid");
  }
  SECTION("empty") {
    reject("", "incomplete");
  }
  SECTION("another format or version") {
    reject(replace(text, "tasksup-shim 1", "tasksup-shim 2"), "version");
  }
  SECTION("numbers out of range or not numbers") {
    reject(replace(text, "agent_pid 4001", "agent_pid -1"), "agent_pid");
    reject(replace(text, "agent_pid 4001", "agent_pid 99999999999"),
           "agent_pid");
    reject(replace(text, "shim_pid 4000", "shim_pid 1"), "shim_pid");
    reject(replace(text, "shim_pid 4000", "shim_pid 0x10"), "shim_pid");
    reject(replace(text, "shim_start 123456", "shim_start 1e9"), "shim_start");
  }
  SECTION("a group the agent does not lead") {
    reject(replace(text, "agent_pgid 4001", "agent_pgid 1"), "agent_pgid");
  }
  SECTION("fields unknown or twice") {
    reject(text + "extra 1\n", "extra");
    reject(text + "agent_pid 4001\n", "twice");
  }
  SECTION("a NUL byte") {
    reject(replace(text, "4000",
                   std::string{"40\0"
                               "0",
                               4}),
           "NUL");
  }
  SECTION("a cgroup outside /sys/fs/cgroup") {
    reject(replace(text, "/sys/fs/cgroup/tasksup/t-1", "/etc"), "cgroup");
    reject(
      replace(text, "/sys/fs/cgroup/tasksup/t-1", "/sys/fs/cgroup/../../etc"),
      "cgroup");
  }
  SECTION("too long") {
    reject(text + std::string(max_record_bytes, 'x'), "longer");
  }
}

TEST_CASE("exit record: exit codes and signals are read back, inconsistent "
          "ones are rejected") {
  exit_record r;
  r.exit_code = 137;
  r.signal = 9;
  r.bytes_not_logged = 12;
  r.duration_us = 1500;
  r.warnings = {"output still open\nafter exit"};
  auto parsed = parse_exit_record(format_exit_record(r), "/a/exit.status");
  REQUIRE(parsed);
  CHECK(parsed->exit_code == 137);
  CHECK(parsed->signal == 9);
  CHECK(parsed->started);
  CHECK(parsed->bytes_not_logged == 12);
  CHECK(parsed->duration_us == 1500);
  // A line break in a warning cannot start a field of its own.
  REQUIRE(parsed->warnings.size() == 1);
  CHECK(parsed->warnings[0] == "output still open after exit");

  auto text = format_exit_record(r);
  auto bad = [](const std::string& content, const std::string& field) {
    auto p = parse_exit_record(content, "/a/exit.status");
    REQUIRE_FALSE(p);
    INFO(p.error().to_string());
    CHECK(p.error().path == field);
  };
  bad(replace(text, "exit_code 137", "exit_code 300"), "exit_code");
  bad(replace(text, "exit_code 137", "exit_code 3"), "exit_code");
  bad(replace(text, "signal 9", "signal 99"), "signal");
  bad(replace(text, "started 1", "started 0"), "error");
  CHECK_FALSE(parse_exit_record(text.substr(0, text.size() - 1), "x"));
}

TEST_CASE("exit record: an agent that never started carries its reason") {
  exit_record r;
  r.started = false;
  r.exit_code = 1;
  r.error = "cannot start x: entering the working directory: No such file";
  auto parsed = parse_exit_record(format_exit_record(r), "p");
  REQUIRE(parsed);
  CHECK_FALSE(parsed->started);
  CHECK(parsed->error == r.error);
}

TEST_CASE("stream index: complete lines only, malformed ones rejected") {
  stream_index_reader reader;
  auto first = reader.feed("o 12\ne 3", "idx");
  REQUIRE(first);
  REQUIRE(first->size() == 1);
  CHECK((*first)[0].kind == 'o');
  CHECK((*first)[0].bytes == 12);
  auto second = reader.feed("4\nn 7\n", "idx");
  REQUIRE(second);
  REQUIRE(second->size() == 2);
  CHECK((*second)[0].kind == 'e');
  CHECK((*second)[0].bytes == 34);
  CHECK((*second)[1].kind == 'n');

  stream_index_reader hostile;
  CHECK_FALSE(hostile.feed("x 1\n", "idx"));
  stream_index_reader negative;
  CHECK_FALSE(negative.feed("o -1\n", "idx"));
  stream_index_reader endless;
  CHECK_FALSE(endless.feed(std::string(100, '1'), "idx"));
}

TEST_CASE("a pid from a record is only taken for the shim it names") {
  auto self = ::getpid();
  auto start = process_start_time(self);
  REQUIRE(start);
  // This test program is alive with that start time, but it is no shim.
  CHECK_FALSE(is_shim_of(self, *start, "/tmp/x"));
  // A start time that does not match is a reused pid.
  CHECK_FALSE(is_shim_of(self, *start + 1, "/tmp/x"));
  CHECK(process_group_of(self) == ::getpgrp());
  CHECK_FALSE(process_start_time(0));
}

TEST_CASE("killing a recorded group spares a group that is not an "
          "attempt's") {
  // Our own group holds this test program, which is not an attempt's
  // process: nothing may be killed. (The group's leader need not be alive:
  // under a test runner started in the background it often is not.)
  CHECK(kill_group_members(::getpgrp(), 0, "/nonexistent/attempt") == 0);
}

TEST_CASE("records are written whole or not at all") {
  auto dir = std::filesystem::temp_directory_path() /
             ("tasksup-record-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "exit.status").string();
  REQUIRE(write_file_atomically(path, "tasksup-shim-exit 1\n").empty());
  auto text = read_small_file(path);
  REQUIRE(text);
  CHECK(*text == "tasksup-shim-exit 1\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto missing = read_small_file((dir / "none").string());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().path == "missing");
  std::filesystem::remove_all(dir);
}

TEST_CASE("shim request: what the runtime encodes the shim reads back") {
  shim_request r;
  r.attempt_dir = "/w/task/attempt-2";
  r.log_bytes = 1 << 20;
  r.drain_ms = 2000;
  r.group_ms = 5000;
  r.cgroup = "/sys/fs/cgroup/tasksup/t-2";
  r.cwd = "/w/task/attempt-2/workspace";
  r.argv = {"sh", "-c", "echo \"$1\"", "", "two words"};
  r.env = {"PATH=/bin", "EMPTY=", "EQ=a=b"};
  auto back = parse_shim_request(encode_shim_request(r));
  REQUIRE(back);
  CHECK(back->attempt_dir == r.attempt_dir);
  CHECK(back->log_bytes == r.log_bytes);
  CHECK(back->drain_ms == r.drain_ms);
  CHECK(back->group_ms == r.group_ms);
  CHECK(back->cgroup == r.cgroup);
  CHECK(back->cwd == r.cwd);
  CHECK(back->argv == r.argv);
  CHECK(back->env == r.env);
}

TEST_CASE("shim request: anything but a complete request is rejected, "
          "saying what is wrong") {
  shim_request r;
  r.attempt_dir = "/w/a";
  r.cwd = "/w/a/workspace";
  r.argv = {"true"};
  auto good = encode_shim_request(r);
  REQUIRE(parse_shim_request(good));
  auto rejects = [](const std::string& text, const std::string& words) {
    auto parsed = parse_shim_request(text);
    REQUIRE_FALSE(parsed);
    INFO(parsed.error().to_string());
    CHECK(parsed.error().to_string().find(words) != std::string::npos);
  };
  rejects("", "unknown header");
  rejects("tasksup-shim-request 2" + std::string(1, '\0'), "unknown header");
  rejects(good.substr(0, good.size() - 1), "not NUL-terminated");
  rejects(good + "arg" + std::string(1, '\0'), "a key without a value");
  rejects(good + std::string{"color\0red\0", 10}, "unknown key 'color'");
  rejects(good + std::string{"env\0NOVALUE\0", 12}, "env: not NAME=value");
  rejects(good + std::string{"env\0=x\0", 7}, "env: not NAME=value");
  rejects(replace(good, std::string{"log-bytes\0000", 11},
                  std::string{"log-bytes\0-1", 12}),
          "log-bytes: not a number");
  rejects(replace(good, std::string{"drain-ms\0000", 10},
                  std::string{"drain-ms\0"
                              "99999999999999999999",
                              29}),
          "drain-ms: not a number");
  rejects(replace(good, "/w/a", "w/a"), "attempt-dir: not an absolute");
  rejects(replace(good, "/w/a/workspace", "workspace"), "cwd: not an absolute");
  rejects(replace(good, std::string{"arg\0true", 8}, std::string{"arg\0", 4}),
          "no command");
  shim_request no_command = r;
  no_command.argv.clear();
  rejects(encode_shim_request(no_command), "no command");
  // A field left out.
  rejects(replace(good, std::string{"cgroup\0\0", 8}, ""), "missing");
  rejects(std::string(max_request_bytes + 1, 'x'), "larger than");
}

TEST_CASE("shim end: the exit record comes with it, taken only once all of "
          "it has arrived") {
  exit_record rec;
  rec.exit_code = 3;
  rec.duration_us = 1234;
  rec.warnings = {"output still open"};
  auto text = format_exit_record(rec);
  auto frame = encode_attempt_end(text);
  // Arriving a byte at a time: nothing until the last one.
  for (std::size_t n = 0; n < frame.size(); ++n) {
    auto partial = parse_attempt_end(std::string_view{frame}.substr(0, n));
    INFO(n);
    REQUIRE(partial);
    CHECK_FALSE(*partial);
  }
  auto whole = parse_attempt_end(frame);
  REQUIRE(whole);
  REQUIRE(*whole);
  CHECK(**whole == text);
  auto back = parse_exit_record(**whole, "exit.status");
  REQUIRE(back);
  CHECK(back->exit_code == 3);
  CHECK(back->warnings == rec.warnings);
}

TEST_CASE("shim end: anything else is refused, saying what it was") {
  auto rejects = [](const std::string& bytes, const std::string& words) {
    auto parsed = parse_attempt_end(bytes);
    REQUIRE_FALSE(parsed);
    INFO(parsed.error().to_string());
    CHECK(parsed.error().to_string().find(words) != std::string::npos);
  };
  rejects("end\n", "expected 'end'");
  rejects("1234\n", "expected 'end'");
  rejects("end x\n", "malformed length");
  rejects("end \n", "malformed length");
  // Longer than any record: refused before it is read.
  rejects("end " + std::to_string(max_record_bytes + 1) + "\n",
          "malformed length");
  rejects("end 123456", "not ended by a newline");
  rejects("end 2\nabc", "bytes after the exit record");
}
