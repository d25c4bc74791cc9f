#include "webhooks.hpp"

#include "safe_text.hpp"
#include "tasksup/actors/atoms.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/webhook/signature.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <caf/event_based_actor.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

namespace tasksup::app {

namespace {

/// Every answer from the node, and the delivery's record in the journal,
/// within this of the delivery's arrival: GitHub gives a delivery 10 s.
constexpr auto webhook_deadline = std::chrono::seconds{9};

constexpr std::string_view hooks_prefix = "/hooks/";

http_response json_answer(int status, const boost::json::value& v) {
  http_response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = boost::json::serialize(v);
  return r;
}

/// The triggers a delivery to `path` is for: every github trigger for
/// /hooks/github, the generic trigger NAME for /hooks/NAME.
std::vector<const trigger_spec*> triggers_for(const trigger_map& all,
                                              std::string_view name) {
  std::vector<const trigger_spec*> out;
  for (auto& [n, t] : all) {
    if (name == "github" ? t.source() == trigger_source::github
                         : t.source() == trigger_source::generic && n == name)
      out.push_back(&t);
  }
  return out;
}

/// One trigger's part of the answer.
struct webhook_result {
  std::string trigger;
  std::string action;
  std::string task_id;
  std::string reason;
  /// The node could not be asked (not a refusal): the sender should retry.
  bool failed = false;
};

/// The answers of one delivery; once the last is in, `finish` is given
/// whether any failed and the answer's JSON.
struct delivery_results {
  using finish_fn = std::function<void(bool failed, boost::json::object)>;

  delivery_results(std::size_t n, std::string delivery, finish_fn f)
    : results(n), pending(n), delivery(std::move(delivery)),
      finish(std::move(f)) {}

  void done(std::size_t i, webhook_result r) {
    results[i] = std::move(r);
    if (--pending > 0)
      return;
    boost::json::array out;
    bool failed = false;
    for (auto& x : results) {
      failed = failed || x.failed;
      boost::json::object o{{"trigger", x.trigger}, {"action", x.action}};
      if (!x.task_id.empty())
        o["task_id"] = x.task_id;
      if (!x.reason.empty())
        o["reason"] = x.reason;
      out.emplace_back(std::move(o));
    }
    finish(failed, boost::json::object{{"delivery", delivery},
                                       {"results", std::move(out)}});
  }

  std::vector<webhook_result> results;
  std::size_t pending;
  std::string delivery;
  finish_fn finish;
};

/// What is left of `webhook_deadline` since `arrived` (at least 100 ms).
caf::timespan left_of_deadline(std::chrono::steady_clock::time_point arrived) {
  auto left = webhook_deadline - (std::chrono::steady_clock::now() - arrived);
  return std::max<caf::timespan>(
    std::chrono::duration_cast<caf::timespan>(left),
    std::chrono::milliseconds{100});
}

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

} // namespace

bool is_webhook_path(const std::string& path) {
  return path.compare(0, hooks_prefix.size(), hooks_prefix) == 0;
}

void handle_webhook(const webhook_context& ctx, const http_request& req,
                    http_reply reply) {
  auto arrived = std::chrono::steady_clock::now();
  auto name = std::string_view{req.path}.substr(hooks_prefix.size());
  if (req.method != "POST") {
    auto r = text_response(405, "use POST");
    r.headers.emplace_back("Allow", "POST");
    return reply.send(std::move(r));
  }
  auto github = name == "github";
  auto candidates = ctx.triggers ? triggers_for(*ctx.triggers, name)
                                 : std::vector<const trigger_spec*>{};
  if (candidates.empty())
    return reply.send(text_response(
      404, github ? "no github trigger (config/triggers/*.json)"
                  : "no generic trigger named '" +
                      printable(std::string{name}.substr(0, 64)) + "'"));
  // The signature first, over the bytes received: nothing unsigned is read.
  auto* signature =
    req.header(github ? "x-hub-signature-256" : generic_signature_header);
  std::vector<const trigger_spec*> signed_by;
  if (signature != nullptr)
    for (auto* t : candidates)
      if (verify_signature(t->secret, req.body, *signature))
        signed_by.push_back(t);
  if (signed_by.empty())
    return reply.send(text_response(
      401, signature == nullptr
             ? "the delivery is not signed (" +
                 std::string{github ? "X-Hub-Signature-256"
                                    : "X-Tasksup-Signature-256"} +
                 ")"
             : "the delivery's signature matches no trigger's secret"));
  std::string event = "generic";
  if (github) {
    auto* e = req.header("x-github-event");
    if (e == nullptr || e->empty())
      return reply.send(text_response(400, "no X-GitHub-Event header"));
    event = *e;
  }
  auto* delivery =
    req.header(github ? "x-github-delivery" : generic_delivery_header);
  if (delivery == nullptr || !valid_delivery_id(*delivery))
    return reply.send(text_response(
      400, std::string{github ? "X-GitHub-Delivery" : "X-Tasksup-Delivery"} +
             ": expected 1 to 128 of A-Z a-z 0-9 _ . -"));
  if (event == "ping")
    return reply.send(text_response(200, "pong"));
  if (ctx.ledger)
    if (auto at = ctx.ledger->seen(*delivery)) {
      if (ctx.log)
        ctx.log("webhook: delivery " + *delivery +
                " was handled before: nothing done again");
      return reply.send(
        json_answer(200, boost::json::object{{"delivery", *delivery},
                                             {"replayed", true},
                                             {"handled_at", *at}}));
    }
  boost::system::error_code ec;
  auto payload = boost::json::parse(req.body, ec);
  if (ec || !payload.is_object())
    return reply.send(text_response(400, "the body is not a JSON object"));
  // Each signing trigger decides; what it starts or stops is asked of the
  // node, the answer waiting for all of them.
  std::vector<std::pair<const trigger_spec*, trigger_decision>> decisions;
  bool any = false;
  for (auto* t : signed_by) {
    auto d = decide(*t, event, *delivery, payload);
    if (ctx.log)
      ctx.log("webhook: delivery " + *delivery + " (" + printable(event) +
              ") for trigger '" + t->name +
              "': " + std::string{to_string(d.action)} +
              (d.task_id.empty() ? "" : " " + d.task_id) +
              (d.reason.empty() ? "" : ": " + d.reason));
    any = any || d.action == trigger_action::start ||
          d.action == trigger_action::stop ||
          d.action == trigger_action::refuse;
    decisions.emplace_back(t, std::move(d));
  }
  if (!any)
    return reply.send(text_response(204, ""));
  ctx.sys->spawn([arrived, door = ctx.door, ledger = ctx.ledger,
                  delivery = *delivery, decisions = std::move(decisions),
                  reply](caf::event_based_actor* self) mutable {
    // The delivery is journaled as handled once everything it asked for
    // was done, before the answer: a replay then does nothing, and one
    // after a failure (503) does again only what had not been done.
    auto finish = [self, ledger, delivery, reply,
                   arrived](bool failed, boost::json::object answer) {
      if (failed || !ledger) {
        reply.send(json_answer(failed ? 503 : 200, answer));
        return;
      }
      auto write = [&](const journal_actor& journal, std::string bytes) {
        self
          ->request(journal, left_of_deadline(arrived), jstate_atom::value,
                    std::string{webhook_state_key}, std::move(bytes), true)
          .then([reply, answer](bool) { reply.send(json_answer(200, answer)); },
                [reply, answer](caf::error& err) mutable {
                  answer["error"] =
                    "the delivery could not be journaled: " + error_text(err);
                  reply.send(json_answer(503, answer));
                });
      };
      if (!ledger->record(delivery, wall_now(), write))
        reply.send(json_answer(200, answer));
    };
    auto out = std::make_shared<delivery_results>(decisions.size(), delivery,
                                                  std::move(finish));
    for (std::size_t i = 0; i < decisions.size(); ++i) {
      auto& [t, d] = decisions[i];
      webhook_result r;
      r.trigger = t->name;
      r.action = std::string{to_string(d.action)};
      r.task_id = d.task_id;
      r.reason = d.reason;
      if (d.action == trigger_action::start) {
        // The report waits before the task can end; it goes again if the
        // node refuses the start (a task that existed has its own, or
        // none).
        bool reported = false;
        if (ledger && d.report)
          reported = ledger->add_report(
            d.task_id, pending_report{*d.report, d.context, 0});
        auto task_id = d.task_id;
        auto undo = [ledger, reported, task_id] {
          if (reported)
            ledger->withdraw(task_id);
        };
        self
          ->request(door, left_of_deadline(arrived), submit_json_atom::value,
                    boost::json::serialize(d.task))
          .then([out, i, r](std::string&) mutable { out->done(i, r); },
                [out, i, r, undo](caf::error& err) mutable {
                  // Refused: no task. Not answered in time: the task may
                  // be journaled yet, and its report with it (a node that
                  // starts drops a report whose task it has not).
                  if (err.category() == protocol_error_category)
                    undo();
                  // A delivery about the same issue finds its task: no
                  // second one.
                  if (is_error(err, protocol_error::duplicate_task)) {
                    r.action = "exists";
                  } else {
                    r.action = "rejected";
                    r.reason = error_text(err);
                    r.failed = err.category() != protocol_error_category;
                  }
                  out->done(i, r);
                });
      } else if (d.action == trigger_action::stop) {
        self
          ->request(door, left_of_deadline(arrived), stop_atom::value,
                    d.task_id, stop_mode::cancel)
          .then(
            [out, i, r](bool took) mutable {
              if (!took)
                r.reason = "its task was not running";
              out->done(i, r);
            },
            [out, i, r](caf::error& err) mutable {
              // No such task: nothing to stop.
              r.reason = error_text(err);
              r.failed = err.category() != protocol_error_category;
              out->done(i, r);
            });
      } else {
        out->done(i, r);
      }
    }
  });
}

} // namespace tasksup::app
