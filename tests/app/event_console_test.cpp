#include "event_console.hpp"

#include "tasksup/actors/events.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace tasksup::app;

namespace {

/// A temporary stream whose text can be read back.
struct captured {
  std::FILE* file = std::tmpfile();
  ~captured() { std::fclose(file); }
  std::string text() const {
    std::fflush(file);
    std::rewind(file);
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0)
      out.append(buf, n);
    return out;
  }
};

constexpr const char* retry = R"({"event":"retry_scheduled","task_id":"t",)"
                              R"("attempt":1,"retry_count":1,"max_retries":3,)"
                              R"("agent":"a","delay_s":15})";
constexpr const char* done = R"({"event":"task_done","task_id":"t",)"
                             R"("attempt":2,"outcome":"succeeded",)"
                             R"("exit_code":0})";

} // namespace

TEST_CASE("events go to the JSON stream exactly as received") {
  captured human;
  captured json;
  event_console console{{human.file, false, false, {}, json.file}};
  boost::json::object extra;
  extra["duration_s"] = 3.0;
  console.write(retry);
  console.write(done, extra);
  CHECK(json.text() == std::string{retry} + "\n" + done + "\n");
  auto view = human.text();
  CHECK(view.find("retrying (1/3) a in 15s\n") != std::string::npos);
  CHECK(view.find("duration: 3s") != std::string::npos);
}

TEST_CASE("off a terminal the view is whole lines: no countdown, no escapes") {
  captured human;
  event_console console{{human.file, false, false, {}, nullptr}};
  console.write(retry);
  console.tick();
  console.tick();
  auto view = human.text();
  CHECK(view.find('\r') == std::string::npos);
  CHECK(view.find('\x1b') == std::string::npos);
}

TEST_CASE("on a terminal a pending retry counts down in place") {
  captured human;
  event_console console{{human.file, true, false, {}, nullptr}};
  console.write(retry);
  console.tick();
  auto view = human.text();
  CHECK(view.find("\r\x1b[K  retrying (1/3) in 15s") != std::string::npos);
  console.write(done);
  view = human.text();
  // The countdown line is cleared before the next line is printed.
  CHECK(view.rfind("\r\x1b[K") < view.find("task succeeded"));
}

TEST_CASE("quiet shows only the summary, a non-object is a warning") {
  captured human;
  event_console console{{human.file, false, true, {}, nullptr}};
  console.write(retry);
  console.write(done);
  console.write("not json");
  auto view = human.text();
  CHECK(view.find("retrying") == std::string::npos);
  CHECK(view.find("task succeeded") != std::string::npos);
  CHECK(view.find("warning") != std::string::npos);
}

TEST_CASE("on a terminal a running attempt shows its elapsed time in place") {
  captured human;
  event_console console{{human.file, true, false, {}, nullptr}};
  console.write(R"({"event":"attempt_started","task_id":"t","attempt":2,)"
                R"("agent_id":"codex","agent_cli":"codex"})");
  console.tick();
  auto view = human.text();
  CHECK(view.find("\r\x1b[K  attempt 2: codex running for 0s") !=
        std::string::npos);
  console.write(R"({"event":"attempt_exited","task_id":"t","attempt":2,)"
                R"("exit_code":0,"duration_s":1.5})");
  auto before = human.text().size();
  console.tick();
  // Exited: the line is cleared and not drawn again.
  CHECK(human.text().substr(before).find("running for") == std::string::npos);
}

TEST_CASE("NO_COLOR turns colours off even on a terminal") {
  captured painted;
  captured plain;
  event_console::options opts{painted.file, true, false, {}, nullptr};
  opts.view.color = true;
  ::unsetenv("NO_COLOR");
  event_console{opts}.write(done);
  ::setenv("NO_COLOR", "1", 1);
  opts.human = plain.file;
  event_console{opts}.write(done);
  ::unsetenv("NO_COLOR");
  CHECK(painted.text().find('\x1b') != std::string::npos);
  CHECK(plain.text().find('\x1b') == std::string::npos);
  CHECK(plain.text().find("task succeeded") != std::string::npos);
}

TEST_CASE("an event of this process: the JSON stream gets its JSON, the view "
          "the same lines as from that JSON") {
  // Built in this process: typed keys, JSON rendered on demand.
  tasksup::event_head h{"t", 1, "0123456789abcdef0123456789abcdef",
                        "0123456789abcdef", 1795362464.5};
  tasksup::delay_decision delay;
  delay.delay_s = 15;
  std::vector<tasksup::event> events{
    tasksup::attempt_started_event(h, "a", "codex", "42"),
    tasksup::log_event(h, "working"),
    tasksup::retry_scheduled_event(h, 1, 3, "a", delay, "rate limited"),
  };
  tasksup::task_result r;
  r.task_id = "t";
  r.outcome = tasksup::task_outcome::succeeded;
  r.exit_code = 0;
  events.push_back(tasksup::task_done_event(h, r));
  captured typed_human;
  captured typed_json;
  captured text_human;
  captured text_json;
  event_console typed{{typed_human.file, false, false, {}, typed_json.file}};
  event_console text{{text_human.file, false, false, {}, text_json.file}};
  progress_view::extra more{3.0, "/tmp/logs"};
  boost::json::object extra;
  extra["duration_s"] = 3.0;
  extra["log_dir"] = "/tmp/logs";
  for (auto& ev : events) {
    bool done = ev.kind == tasksup::event_kind::task_done;
    typed.write(ev, done ? more : progress_view::extra{});
    text.write(ev.json(), done ? extra : boost::json::object{});
  }
  CHECK(typed_json.text() == text_json.text());
  CHECK(typed_human.text() == text_human.text());
  CHECK(typed_human.text().find("  logs: /tmp/logs\n") != std::string::npos);
  // An event read back from JSON (no typed keys) takes the JSON's way,
  // extra keys included.
  captured read_human;
  event_console read{{read_human.file, false, false, {}, nullptr}};
  tasksup::event back;
  back.kind = tasksup::event_kind::task_done;
  back.body = tasksup::json_event_body("", "", events.back().json());
  read.write(back, more);
  CHECK(read_human.text().find("  duration: 3s\n  logs: /tmp/logs\n") !=
        std::string::npos);
}
