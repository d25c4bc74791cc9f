#include "event_console.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <system_error>

namespace tasksup::app {

namespace {

/// Colours only make sense on a terminal.
event_console::options normalized(event_console::options opts) {
  if (!opts.terminal)
    opts.view.color = false;
  return opts;
}

} // namespace

event_console::event_console(options opts)
  : opts_(normalized(opts)), view_(opts_.view) {}

void event_console::write(std::string_view json,
                          const boost::json::object& extra) {
  if (opts_.json) {
    std::fwrite(json.data(), 1, json.size(), opts_.json);
    std::fputc('\n', opts_.json);
    std::fflush(opts_.json);
  }
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
  auto lines = view_.render(event);
  if (kind == "retry_scheduled" && view_.pending())
    pending_since_ = std::chrono::steady_clock::now();
  else if (!view_.pending())
    pending_since_.reset();
  bool always = kind == "task_done" || kind == "warning";
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
  if (!pending || !pending_since_) {
    clear_countdown();
    return;
  }
  using namespace std::chrono;
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
