#include "tasksup/supervisor/slot_scheduler.hpp"

#include <algorithm>
#include <utility>

namespace tasksup {

slot_scheduler::slot_scheduler(int local_limit)
  : local_limit_{static_cast<std::size_t>(std::max(1, local_limit))} {
  // nop
}

std::size_t slot_scheduler::local_in_use() const {
  return static_cast<std::size_t>(
    std::count_if(holders_.begin(), holders_.end(),
                  [](auto& x) { return x.second.node.empty(); }));
}

std::optional<std::string>
slot_scheduler::place(const slot_request& req) const {
  if (req.local_only || nodes_.empty()) {
    // This node carries no labels, and after a restart its workers' tasks
    // wait for them.
    if (!req.local_only && (awaiting_nodes_ || !req.placement.labels.empty()))
      return std::nullopt;
    if (local_in_use() < local_limit_)
      return std::string{};
    return std::nullopt;
  }
  if (auto i = choose_node(loads(), req.placement))
    return std::next(nodes_.begin(), static_cast<std::ptrdiff_t>(*i))->first;
  return std::nullopt;
}

std::vector<node_load> slot_scheduler::loads() const {
  std::vector<node_load> out;
  out.reserve(nodes_.size());
  for (auto& kv : nodes_)
    out.push_back(kv.second);
  return out;
}

bool slot_scheduler::any_free() const {
  return local_in_use() < local_limit_ ||
         std::any_of(nodes_.begin(), nodes_.end(),
                     [](auto& x) { return x.second.free() > 0; });
}

void slot_scheduler::take(const std::string& task_id, const std::string& node) {
  holders_.insert_or_assign(task_id, holder{node, false});
  if (auto n = nodes_.find(node); n != nodes_.end())
    ++n->second.running;
}

std::vector<slot_grant> slot_scheduler::serve() {
  std::vector<slot_grant> out;
  if (held_)
    return out;
  // Stops once every slot is taken: a slot given back serves one task, not
  // a walk of the whole queue.
  for (auto i = queue_.begin(); i != queue_.end() && any_free();) {
    auto node = place(*i);
    if (!node) {
      ++i;
      continue;
    }
    take(i->task_id, *node);
    queued_ids_.erase(i->task_id);
    out.push_back(slot_grant{std::move(i->task_id), std::move(*node)});
    i = queue_.erase(i);
  }
  return out;
}

std::optional<std::string> slot_scheduler::request(slot_request req) {
  if (auto i = holders_.find(req.task_id); i != holders_.end())
    return i->second.node;
  if (queued_ids_.count(req.task_id) > 0)
    return std::nullopt;
  // Every queued task fits nowhere now (each change that could let one in
  // serves the queue), so a newcomer that fits overtakes no one who could
  // use its slot.
  if (!held_)
    if (auto node = place(req)) {
      take(req.task_id, *node);
      return node;
    }
  queue_.push_back(std::move(req));
  queued_ids_.emplace(queue_.back().task_id, std::prev(queue_.end()));
  return std::nullopt;
}

std::vector<slot_grant> slot_scheduler::release(const std::string& task_id) {
  if (auto i = holders_.find(task_id); i != holders_.end()) {
    if (i->second.counted())
      if (auto n = nodes_.find(i->second.node); n != nodes_.end())
        --n->second.running;
    holders_.erase(i);
  } else {
    auto q = queued_ids_.find(task_id);
    if (q == queued_ids_.end())
      return {};
    queue_.erase(q->second);
    queued_ids_.erase(q);
  }
  return serve();
}

void slot_scheduler::reclaim(const std::string& task_id,
                             const std::string& node) {
  if (auto i = holders_.find(task_id);
      i != holders_.end() && i->second.counted())
    if (auto n = nodes_.find(i->second.node); n != nodes_.end())
      --n->second.running;
  holder h{node, false, false};
  if (!node.empty()) {
    if (auto n = nodes_.find(node); n != nodes_.end())
      ++n->second.running;
    else
      h.unjoined = true;
  }
  holders_.insert_or_assign(task_id, std::move(h));
}

void slot_scheduler::hold() {
  held_ = true;
}

std::vector<slot_grant> slot_scheduler::resume(
  const std::function<std::int64_t(const std::string&)>& order) {
  held_ = false;
  // Stable, and the places in `queued_ids_` stay valid.
  queue_.sort(
    [&](auto& x, auto& y) { return order(x.task_id) < order(y.task_id); });
  return serve();
}

std::vector<slot_grant> slot_scheduler::stop_awaiting_nodes() {
  awaiting_nodes_ = false;
  return serve();
}

std::vector<slot_grant> slot_scheduler::add_node(node_offer offer) {
  awaiting_nodes_ = false;
  auto name = offer.name;
  int reclaimed = 0;
  for (auto& [id, h] : holders_)
    if (h.node == name && h.unjoined) {
      h.unjoined = false;
      ++reclaimed;
    }
  nodes_.insert_or_assign(std::move(name),
                          node_load{std::move(offer), reclaimed});
  return serve();
}

std::vector<slot_grant> slot_scheduler::remove_node(const std::string& name) {
  if (nodes_.erase(name) == 0)
    return {};
  for (auto& [id, h] : holders_)
    if (h.node == name)
      h.orphaned = true;
  return serve();
}

int slot_scheduler::running_on(const std::string& name) const {
  auto i = nodes_.find(name);
  return i == nodes_.end() ? 0 : i->second.running;
}

std::vector<std::pair<std::string, node_load>> slot_scheduler::nodes() const {
  return {nodes_.begin(), nodes_.end()};
}

std::optional<std::string>
slot_scheduler::node_of(const std::string& task_id) const {
  if (auto i = holders_.find(task_id); i != holders_.end())
    return i->second.node;
  return std::nullopt;
}

std::optional<std::string>
slot_scheduler::waiting_reason(const std::string& task_id) const {
  auto place = queued_ids_.find(task_id);
  if (place == queued_ids_.end())
    return std::nullopt;
  auto q = place->second;
  if (held_)
    return std::string{"the node is resuming its tasks after a restart"};
  if (!q->local_only && nodes_.empty() && awaiting_nodes_)
    return std::string{"waiting for the worker nodes to join again after the "
                       "coordinator's restart"};
  if (q->local_only || (nodes_.empty() && q->placement.labels.empty()))
    return "all " + std::to_string(local_limit_) +
           " attempt slots of this node are busy";
  return unplaced_reason(loads(), q->placement);
}

int slot_scheduler::capacity() const {
  if (nodes_.empty())
    return static_cast<int>(local_limit_);
  int n = 0;
  for (auto& kv : nodes_)
    n += kv.second.offer.max_concurrent;
  return n;
}

} // namespace tasksup
