#include "webhook_ledger.hpp"

#include "tasksup/actors/atoms.hpp"

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <caf/send.hpp>

#include <algorithm>
#include <utility>

namespace tasksup::app {

namespace {

namespace json = boost::json;

/// The strings of `v`, an array of strings; nullopt for anything else.
std::optional<std::vector<std::string>> strings(const json::value* v) {
  if (v == nullptr || !v->is_array())
    return std::nullopt;
  std::vector<std::string> out;
  for (const auto& x : v->get_array()) {
    if (!x.is_string())
      return std::nullopt;
    out.emplace_back(x.get_string());
  }
  return out;
}

/// A saved report; nullopt when it is not one this node writes.
std::optional<pending_report> read_report(const json::value& v) {
  if (!v.is_object())
    return std::nullopt;
  const auto& obj = v.get_object();
  pending_report out;
  auto command = obj.if_contains("command")
                   ? strings(obj.if_contains("command"))
                   : std::vector<std::string>{};
  auto on = strings(obj.if_contains("on"));
  const auto* url = obj.if_contains("url");
  const auto* context = obj.if_contains("context");
  if (!command || !on || (url != nullptr && !url->is_string()) ||
      context == nullptr || !context->is_object())
    return std::nullopt;
  out.report.command = std::move(*command);
  out.report.on = std::move(*on);
  if (url != nullptr)
    out.report.url = std::string{url->get_string()};
  if (out.report.command.empty() && out.report.url.empty())
    return std::nullopt;
  out.context = context->get_object();
  return out;
}

json::object write_report(const pending_report& r) {
  json::object out;
  if (!r.report.command.empty())
    out["command"] =
      json::array(r.report.command.begin(), r.report.command.end());
  if (!r.report.url.empty())
    out["url"] = r.report.url;
  out["on"] = json::array(r.report.on.begin(), r.report.on.end());
  out["context"] = r.context;
  return out;
}

} // namespace

webhook_ledger::webhook_ledger(journal_actor journal, const std::string& saved,
                               log_fn warn, webhook_ledger_limits limits)
  : journal_(std::move(journal)), warn_(std::move(warn)), limits_(limits) {
  if (saved.empty())
    return;
  auto say = [this](const std::string& x) {
    if (warn_)
      warn_("webhooks: " + x);
  };
  boost::system::error_code ec;
  auto doc = json::parse(saved, ec);
  if (ec || !doc.is_object()) {
    say("the journal's record of deliveries and reports cannot be read; "
        "starting without it");
    return;
  }
  const auto& obj = doc.get_object();
  if (const auto* d = obj.if_contains("deliveries"); d && d->is_object()) {
    for (const auto& kv : d->get_object()) {
      std::string id{kv.key()};
      if (!valid_delivery_id(id) || !kv.value().is_number()) {
        say("a delivery record cannot be read; dropped");
        continue;
      }
      deliveries_.emplace(std::move(id), kv.value().to_number<double>());
    }
  }
  if (const auto* r = obj.if_contains("reports"); r && r->is_object()) {
    for (const auto& kv : r->get_object()) {
      std::string task_id{kv.key()};
      auto report = read_report(kv.value());
      if (!report) {
        say("the report for task '" + task_id.substr(0, 64) +
            "' cannot be read; it will not be sent");
        continue;
      }
      reports_.emplace(std::move(task_id), std::move(*report));
    }
  }
}

std::optional<double> webhook_ledger::seen(const std::string& id) const {
  std::lock_guard<std::mutex> guard{mutex_};
  if (auto i = deliveries_.find(id); i != deliveries_.end())
    return i->second;
  return std::nullopt;
}

bool webhook_ledger::record(
  const std::string& id, double now,
  const std::function<void(const journal_actor&, std::string)>& write) {
  std::lock_guard<std::mutex> guard{mutex_};
  deliveries_[id] = now;
  trim(now);
  if (!journal_)
    return false;
  write(journal_, serialize_locked());
  return true;
}

bool webhook_ledger::add_report(const std::string& task_id,
                                pending_report report) {
  std::lock_guard<std::mutex> guard{mutex_};
  if (reports_.count(task_id) > 0)
    return false;
  if (reports_.size() >= limits_.max_reports) {
    if (warn_)
      warn_("webhooks: " + std::to_string(reports_.size()) +
            " reports wait already; task '" + task_id + "' starts without one");
    return false;
  }
  report.handed = 0;
  reports_.emplace(task_id, std::move(report));
  save();
  return true;
}

void webhook_ledger::withdraw(const std::string& task_id) {
  std::lock_guard<std::mutex> guard{mutex_};
  if (reports_.erase(task_id) > 0)
    save();
}

std::optional<pending_report> webhook_ledger::take(const std::string& task_id,
                                                   std::string_view outcome) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto i = reports_.find(task_id);
  if (i == reports_.end() || i->second.handed > 0)
    return std::nullopt;
  auto& on = i->second.report.on;
  if (std::find(on.begin(), on.end(), outcome) == on.end()) {
    reports_.erase(i);
    save();
    return std::nullopt;
  }
  i->second.handed = (i->second.report.command.empty() ? 0 : 1) +
                     (i->second.report.url.empty() ? 0 : 1);
  return i->second;
}

void webhook_ledger::settled(const std::string& task_id) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto i = reports_.find(task_id);
  if (i == reports_.end() || i->second.handed == 0)
    return;
  if (--i->second.handed > 0)
    return;
  reports_.erase(i);
  save();
}

std::vector<std::string> webhook_ledger::waiting() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::vector<std::string> out;
  for (const auto& [id, r] : reports_)
    if (r.handed == 0)
      out.push_back(id);
  return out;
}

std::size_t webhook_ledger::deliveries() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return deliveries_.size();
}

std::size_t webhook_ledger::reports() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return reports_.size();
}

std::string webhook_ledger::serialize() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return serialize_locked();
}

void webhook_ledger::trim(double now) {
  for (auto i = deliveries_.begin(); i != deliveries_.end();) {
    if (now - i->second > limits_.delivery_memory_s)
      i = deliveries_.erase(i);
    else
      ++i;
  }
  while (deliveries_.size() > limits_.max_deliveries) {
    auto oldest = std::min_element(
      deliveries_.begin(), deliveries_.end(),
      [](const auto& x, const auto& y) { return x.second < y.second; });
    deliveries_.erase(oldest);
  }
}

void webhook_ledger::save() {
  if (journal_)
    caf::anon_send(journal_, jstate_atom::value, std::string{webhook_state_key},
                   serialize_locked());
}

std::string webhook_ledger::serialize_locked() const {
  json::object deliveries;
  for (const auto& [id, at] : deliveries_)
    deliveries[id] = at;
  json::object reports;
  for (const auto& [id, r] : reports_)
    reports[id] = write_report(r);
  return json::serialize(json::object{{"deliveries", std::move(deliveries)},
                                      {"reports", std::move(reports)}});
}

} // namespace tasksup::app
