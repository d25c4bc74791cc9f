#include "event_console.hpp"

#include "tasksup/supervisor/events.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <system_error>

namespace tasksup::app {

bool no_color() {
  auto* v = std::getenv("NO_COLOR");
  return v != nullptr && *v != '\0';
}

namespace {

/// Colours only make sense on a terminal, and not when NO_COLOR is set.
event_console::options normalized(event_console::options opts) {
  if (!opts.terminal || no_color())
    opts.view.color = false;
  return opts;
}

} // namespace

event_console::event_console(options opts)
  : opts_(normalized(opts)), view_(opts_.view) {}

void event_console::write_json(std::string_view json) {
  if (!opts_.json)
    return;
  std::fwrite(json.data(), 1, json.size(), opts_.json);
  std::fputc('\n', opts_.json);
  std::fflush(opts_.json);
}

void event_console::write(std::string_view json,
                          const boost::json::object& extra) {
  write_json(json);
  if (!opts_.human)
    return;
  boost::system::error_code ec;
  auto doc = boost::json::parse(json, ec);
  if (ec || !doc.is_object()) {
    print("warning: an event that is not a JSON object was skipped");
    return;
  }
  auto& event = doc.get_object();
  for (auto& [key, value] : extra)
    event[key] = value;
  std::string kind;
  if (auto* k = event.if_contains("event"); k && k->is_string())
    kind = k->get_string();
  show(view_.render(event), kind == "attempt_started",
       kind == "retry_scheduled", kind == "task_done" || kind == "warning");
}

void event_console::write(const event& ev, const progress_view::extra& more) {
  if (!ev.fields()) {
    // Read back from JSON (journal, another node): no typed keys.
    boost::json::object extra;
    if (more.duration_s)
      extra["duration_s"] = *more.duration_s;
    if (!more.log_dir.empty())
      extra["log_dir"] = more.log_dir;
    write(ev.json(), extra);
    return;
  }
  if (opts_.json)
    write_json(ev.json()); // rendered only for a JSON stream
  if (!opts_.human)
    return;
  show(view_.render(ev, more), ev.kind == event_kind::attempt_started,
       ev.kind == event_kind::retry_scheduled,
       ev.kind == event_kind::task_done || ev.kind == event_kind::warning);
}

void event_console::show(const std::vector<std::string>& lines, bool started,
                         bool scheduled, bool always) {
  if (scheduled && view_.pending())
    pending_since_ = std::chrono::steady_clock::now();
  else if (!view_.pending())
    pending_since_.reset();
  if (started && view_.running())
    running_since_ = std::chrono::steady_clock::now();
  else if (!view_.running())
    running_since_.reset();
  if (opts_.quiet && !always)
    return;
  for (auto& line : lines)
    print(line);
  tick();
}

void event_console::tick() {
  if (!opts_.terminal || opts_.quiet || !opts_.human)
    return;
  auto& pending = view_.pending();
  using namespace std::chrono;
  if ((!pending || !pending_since_) && view_.running() && running_since_) {
    auto ran = duration<double>(steady_clock::now() - *running_since_).count();
    auto text = "  " + *view_.running() + " running for " +
                human_duration(std::floor(ran));
    std::fprintf(opts_.human, "\r\x1b[K%s", text.c_str());
    std::fflush(opts_.human);
    countdown_shown_ = true;
    return;
  }
  if (!pending || !pending_since_) {
    clear_countdown();
    return;
  }
  auto waited = duration<double>(steady_clock::now() - *pending_since_).count();
  auto left = std::max(0.0, pending->delay_s - waited);
  auto text = "  " + pending->text + " in " + human_duration(std::ceil(left));
  std::fprintf(opts_.human, "\r\x1b[K%s", text.c_str());
  std::fflush(opts_.human);
  countdown_shown_ = true;
}

void event_console::note(const std::string& line) {
  if (opts_.human)
    print(line);
}

void event_console::clear_countdown() {
  if (!countdown_shown_)
    return;
  std::fputs("\r\x1b[K", opts_.human);
  std::fflush(opts_.human);
  countdown_shown_ = false;
}

void event_console::print(const std::string& line) {
  clear_countdown();
  std::fputs(line.c_str(), opts_.human);
  std::fputc('\n', opts_.human);
  std::fflush(opts_.human);
}

} // namespace tasksup::app
