// A task supervisor after its node restarted: the task rebuilt from its
// journaled inputs, the attempt directories the journal does not know set
// aside, and the task resumed where it was.

#include "supervisor_state.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tasksup::detail {

namespace {

/// Moves aside the attempt directories of this task beyond its last
/// recorded attempt: their start was committed but not yet on disk when the
/// machine went down (the attempts died with it), and their numbers are
/// given again. `attempt-<n>` becomes `attempt-<n>.unrecorded` (`-2`, `-3`,
/// ... if taken): attempt directories are never reused.
void set_aside_unrecorded(const supervisor_state& s) {
  namespace fs = std::filesystem;
  if (s.node->attempt_root.empty())
    return;
  auto dir = fs::path{s.node->attempt_root} / s.task_id();
  std::vector<fs::path> unrecorded;
  std::error_code ec;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end;
       it.increment(ec)) {
    auto name = it->path().filename().string();
    constexpr std::string_view prefix = "attempt-";
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        !std::all_of(name.begin() + prefix.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (std::stoi(name.substr(prefix.size())) > s.m.attempt)
      unrecorded.push_back(it->path());
  }
  for (auto& from : unrecorded) {
    auto to = from.string() + ".unrecorded";
    for (int k = 2; fs::exists(to, ec) && k < 1000; ++k)
      to = from.string() + ".unrecorded-" + std::to_string(k);
    fs::rename(from, to, ec);
    std::fprintf(stderr,
                 "tasksup: task '%s': %s has no record in the journal (the "
                 "machine went down before it was on disk); %s\n",
                 s.task_id().c_str(), from.c_str(),
                 ec ? ("cannot move it aside: " + ec.message()).c_str()
                    : ("moved to " + to).c_str());
  }
}

} // namespace

void resume(supervisor_actor self, std::vector<journaled_input> replay) {
  auto& st = self->state;
  machine_effects fx;
  for (auto& r : replay) {
    fx.clear();
    st.machine().handle(st.m, r.in, r.at_s, fx);
    ++st.journal_n;
    // The span ids follow the attempts, as they did.
    for (auto& e : fx)
      if (std::holds_alternative<effect::start_attempt>(e))
        st.span = st.ids->span_id();
    if (auto* end = std::get_if<input::attempt_ended>(&r.in);
        end && !end->outcome.succeeded())
      st.to_classify = std::move(end->outcome);
    if (auto* started = std::get_if<input::attempt_started>(&r.in))
      st.adopt_id = started->runtime_id;
  }
  set_aside_unrecorded(st);
  if (st.m.phase == task_phase::done) {
    // The task ended just before the restart; its end was not recorded.
    machine_effects finish;
    for (auto& e : fx)
      if (std::holds_alternative<effect::finish>(e))
        finish.push_back(std::move(e));
    carry(self, finish);
    return;
  }
  drive(self, input::resumed{}, [self](bool) {
    auto& st = self->state;
    if (st.node->services)
      self->send(st.node->services, resumed_atom::value, st.task_id(),
                 st.adopted_dir, st.worker ? st.adopt_id : std::string{},
                 st.worker ? st.adopted_attempt : 0);
  });
}

} // namespace tasksup::detail
