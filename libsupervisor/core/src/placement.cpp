#include "tasksup/supervisor/placement.hpp"

#include "tasksup/supervisor/task_spec.hpp"

#include <algorithm>

namespace tasksup {

namespace {

bool has_runtime(const node_offer& node, const std::string& runtime) {
  return std::find(node.runtimes.begin(), node.runtimes.end(), runtime) !=
         node.runtimes.end();
}

bool has_label(const node_offer& node, const std::string& key,
               const std::string& value) {
  auto i = node.labels.find(key);
  return i != node.labels.end() && i->second == value;
}

bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '/';
}

bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

} // namespace

bool fits(const node_offer& node, const placement_request& req) {
  if (!has_runtime(node, req.runtime))
    return false;
  for (auto& [key, value] : req.labels)
    if (!has_label(node, key, value))
      return false;
  return true;
}

std::optional<std::size_t> choose_node(const std::vector<node_load>& nodes,
                                       const placement_request& req) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    if (n.free() <= 0 || !fits(n.offer, req))
      continue;
    if (!best || n.free() > nodes[*best].free())
      best = i;
  }
  return best;
}

std::string unplaced_reason(const std::vector<node_load>& nodes,
                            const placement_request& req) {
  if (nodes.empty())
    return req.labels.empty()
             ? std::string{"no worker node has joined"}
             : "no worker node has joined, and the coordinator carries no "
               "labels (the task asks for " +
                 to_string(req.labels) + ")";
  auto with_runtime = std::count_if(nodes.begin(), nodes.end(), [&](auto& n) {
    return has_runtime(n.offer, req.runtime);
  });
  if (with_runtime == 0)
    return "no worker node has the " + req.runtime + " runtime";
  for (auto& label : req.labels) {
    const auto& [key, value] = label;
    auto any = std::any_of(nodes.begin(), nodes.end(), [&](auto& n) {
      return has_runtime(n.offer, req.runtime) &&
             has_label(n.offer, label.first, label.second);
    });
    if (!any)
      return "no worker node with the " + req.runtime + " runtime has label " +
             key + "=" + value;
  }
  int fitting = 0;
  int running = 0;
  int capacity = 0;
  for (auto& n : nodes) {
    if (!fits(n.offer, req))
      continue;
    ++fitting;
    running += n.running;
    capacity += n.offer.max_concurrent;
  }
  if (fitting == 0)
    return "no single worker node has all of " + to_string(req.labels);
  return "every fitting worker node is busy (" + std::to_string(fitting) +
         " node(s), " + std::to_string(running) + " of " +
         std::to_string(capacity) + " attempts running)";
}

expected<bool> check_label(std::string_view key, std::string_view value,
                           std::string_view what) {
  auto fail = [&](std::string why) {
    return tasksup::error{"", "", std::string{what} + ": " + why};
  };
  if (key.empty() || key.size() > max_label_key_bytes || !alnum(key[0]) ||
      !std::all_of(key.begin(), key.end(), key_char))
    return fail("a label key is 1-" + std::to_string(max_label_key_bytes) +
                " letters, digits, '.', '_', '-' or '/', starting with a "
                "letter or digit");
  if (value.size() > max_label_value_bytes)
    return fail("a label value is at most " +
                std::to_string(max_label_value_bytes) + " bytes");
  for (char c : value)
    if (c < 0x20 || c > 0x7e)
      return fail("a label value is printable ASCII");
  return true;
}

expected<std::pair<std::string, std::string>>
parse_label(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return tasksup::error{"", "",
                          "label \"" + std::string{text} +
                            "\": expected KEY=VALUE, e.g. gpu=true"};
  auto key = text.substr(0, eq);
  auto value = text.substr(eq + 1);
  if (auto ok = check_label(key, value, "label \"" + std::string{text} + "\"");
      !ok)
    return ok.error();
  return std::pair{std::string{key}, std::string{value}};
}

expected<bool> check_offer(const node_offer& offer) {
  auto fail = [&](std::string why) {
    return tasksup::error{"", "", "node offer: " + why};
  };
  if (auto ok = check_label(offer.name, "", "node name"); !ok)
    return fail("the name must be like a label key (1-63 letters, digits, "
                "'.', '_', '-' or '/')");
  if (offer.max_concurrent < 1 || offer.max_concurrent > 100000)
    return fail("max_concurrent must be 1-100000, got " +
                std::to_string(offer.max_concurrent));
  if (offer.runtimes.empty() || offer.runtimes.size() > runtime_names.size())
    return fail("it must name 1-" + std::to_string(runtime_names.size()) +
                " runtimes");
  for (auto& r : offer.runtimes)
    if (!known_runtime(r))
      return fail("unknown runtime \"" + r.substr(0, 32) + "\"");
  if (offer.labels.size() > max_labels)
    return fail("at most " + std::to_string(max_labels) + " labels");
  for (auto& [key, value] : offer.labels)
    if (auto ok = check_label(key, value, "node label"); !ok)
      return fail(ok.error().what);
  if (!(offer.lease_s >= 0 && offer.lease_s <= 3600))
    return fail("the lease must be 0-3600 seconds");
  return true;
}

std::string to_string(const label_map& labels) {
  std::string out;
  for (auto& [key, value] : labels) {
    if (!out.empty())
      out += ',';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

} // namespace tasksup
