// The registry's answers to `status`: every task at once, or a page of
// them. A finished task's record and a group's row are the registry's own;
// an active task's status is its supervisor's, asked only for the tasks an
// answer holds (unless a filter needs every unfinished task's state).

#include "registry_state.hpp"

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::detail {

namespace {

/// Visits the finished tasks, the active ones and `groups` (ascending by
/// id) merged in ascending id order: `f(id, record)`, where the record is
/// null for an active task (its supervisor knows it).
template<class F>
void visit_in_order(const registry_state& st,
                    const std::vector<task_status>& groups, F f) {
  auto fi = st.finished.begin();
  auto ai = st.active.begin();
  auto gi = groups.begin();
  for (;;) {
    const std::string* least = nullptr;
    int from = -1;
    if (fi != st.finished.end()) {
      least = &fi->first;
      from = 0;
    }
    if (ai != st.active.end() && (!least || ai->first < *least)) {
      least = &ai->first;
      from = 1;
    }
    if (gi != groups.end() && (!least || gi->task_id < *least)) {
      least = &gi->task_id;
      from = 2;
    }
    switch (from) {
      case 0:
        f(fi->first, &fi->second);
        ++fi;
        break;
      case 1:
        f(ai->first, nullptr);
        ++ai;
        break;
      case 2:
        f(gi->task_id, &*gi);
        ++gi;
        break;
      default:
        return;
    }
  }
}

/// The groups' rows, ascending by id.
std::vector<task_status> group_rows(registry_ptr self) {
  std::vector<task_status> out;
  add_group_status(self, out);
  std::sort(out.begin(), out.end(),
            [](auto& x, auto& y) { return x.task_id < y.task_id; });
  return out;
}

} // namespace

void ask_statuses(
  registry_ptr self, std::vector<std::string> ids,
  std::function<void(std::map<std::string, task_status>)> done) {
  auto& st = self->state;
  auto acc = std::make_shared<std::map<std::string, task_status>>();
  auto pending = std::make_shared<std::size_t>(ids.size());
  if (ids.empty())
    return done(std::move(*acc));
  auto one_less = [=] {
    if (--*pending == 0)
      done(std::move(*acc));
  };
  for (auto& id : ids) {
    auto i = st.active.find(id);
    if (i == st.active.end()) {
      when_finished(self, id, [=](const task_status* finished) {
        if (finished)
          acc->insert_or_assign(id, *finished);
        one_less();
      });
      continue;
    }
    self->request(i->second.supervisor, caf::infinite, status_atom::value)
      .then(
        [=](task_status& s) {
          add_placement(self, s);
          acc->insert_or_assign(id, std::move(s));
          one_less();
        },
        [=](caf::error&) {
          // Finished between the question and the answer (see
          // ask_supervisor).
          when_finished(self, id, [=](const task_status* finished) {
            if (finished)
              acc->insert_or_assign(id, *finished);
            one_less();
          });
        });
  }
}

caf::result<std::vector<task_status>> all_status(registry_ptr self) {
  auto& st = self->state;
  expire_finished(self, wall_now());
  std::vector<task_status> out;
  for (auto& f : st.finished_order)
    out.push_back(st.finished[f.id]);
  add_group_status(self, out);
  if (st.active.empty())
    return out;
  std::vector<std::string> ids;
  ids.reserve(st.active.size());
  for (auto& entry : st.active)
    ids.push_back(entry.first);
  auto rp = self->make_response_promise<std::vector<task_status>>();
  auto acc = std::make_shared<std::vector<task_status>>(std::move(out));
  ask_statuses(self, std::move(ids),
               [=](std::map<std::string, task_status> active) mutable {
                 for (auto& entry : active)
                   acc->push_back(std::move(entry.second));
                 std::sort(acc->begin(), acc->end(), [](auto& x, auto& y) {
                   return x.task_id < y.task_id;
                 });
                 rp.deliver(std::move(*acc));
               });
  return rp;
}

caf::result<status_page> status_page_of(registry_ptr self,
                                        const status_query& q) {
  auto& st = self->state;
  expire_finished(self, wall_now());
  auto groups = std::make_shared<std::vector<task_status>>(group_rows(self));
  auto total = st.finished.size() + st.active.size() + groups->size();
  // Builds the page once `active` holds what the filter needs of the
  // active tasks: every one's status, or none (then an active task passes
  // as the filter admits unfinished tasks, and the page's ones are asked
  // for afterwards, `fill`).
  auto build = [self, q, groups,
                total](const std::map<std::string, task_status>* active,
                       std::vector<std::pair<std::size_t, std::string>>& fill) {
    status_page page;
    page.total = total;
    visit_in_order(self->state, *groups,
                   [&](const std::string& id, const task_status* record) {
                     if (!record && active) {
                       auto i = active->find(id);
                       if (i == active->end())
                         return; // gone meanwhile
                       record = &i->second;
                     }
                     if (record ? !q.admits(*record) : !q.admits_unfinished())
                       return;
                     ++page.matched;
                     if (!q.after.empty() && id <= q.after)
                       return;
                     if (q.limit != 0 && page.tasks.size() >= q.limit) {
                       ++page.more;
                       return;
                     }
                     if (!record) {
                       fill.emplace_back(page.tasks.size(), id);
                       page.tasks.emplace_back().task_id = id;
                     } else {
                       page.tasks.push_back(*record);
                     }
                   });
    return page;
  };
  auto rp = self->make_response_promise<status_page>();
  if (q.needs_unfinished_status()) {
    std::vector<std::string> ids;
    ids.reserve(st.active.size());
    for (auto& entry : st.active)
      ids.push_back(entry.first);
    ask_statuses(self, std::move(ids),
                 [=](std::map<std::string, task_status> active) mutable {
                   std::vector<std::pair<std::size_t, std::string>> none;
                   rp.deliver(build(&active, none));
                 });
    return rp;
  }
  std::vector<std::pair<std::size_t, std::string>> fill;
  auto page = std::make_shared<status_page>(build(nullptr, fill));
  std::vector<std::string> ids;
  ids.reserve(fill.size());
  for (auto& f : fill)
    ids.push_back(f.second);
  ask_statuses(self, std::move(ids),
               [=](std::map<std::string, task_status> active) mutable {
                 // A task forgotten meanwhile (replaced, expired) leaves
                 // the page and the counts: back to front, so the indexes
                 // still to fill stay right.
                 for (auto f = fill.rbegin(); f != fill.rend(); ++f) {
                   if (auto i = active.find(f->second); i != active.end()) {
                     page->tasks[f->first] = std::move(i->second);
                   } else {
                     page->tasks.erase(page->tasks.begin() +
                                       static_cast<std::ptrdiff_t>(f->first));
                     --page->matched;
                     --page->total;
                   }
                 }
                 rp.deliver(std::move(*page));
               });
  return rp;
}

} // namespace tasksup::detail
