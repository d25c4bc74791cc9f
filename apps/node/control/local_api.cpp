#include "local_api.hpp"

#include "json_text.hpp"
#include "local_control.hpp"
#include "status_record.hpp"
#include "status_view.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include <caf/event_based_actor.hpp>

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::app {

namespace {

http_response json_answer(int status, const boost::json::value& v) {
  http_response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = json_text(v);
  return r;
}

/// A failed or refused request, as the command reports it.
boost::json::object failure_of(const caf::error& err) {
  return {{"error", error_text(err)},
          {"refused", err.category() == protocol_error_category},
          {"timeout", err == caf::sec::request_timeout}};
}

http_response error_answer(const caf::error& err) {
  bool refused = err.category() == protocol_error_category;
  return json_answer(refused ? 404 : 503, failure_of(err));
}

http_response bad_request(std::string why) {
  return json_answer(400, boost::json::object{{"error", std::move(why)},
                                              {"refused", true},
                                              {"timeout", false}});
}

/// Answers `reply` with `all` (every task, or the one `task_id` names) and
/// the times the node's statistics keep, asked of `stats` as typed values
/// (the TCP path reads them from the view's JSON, `status_command.cpp`).
void answer_status(caf::event_based_actor* self, const stats_actor& stats,
                   std::vector<task_status> all, const std::string& task_id,
                   const http_reply& reply,
                   std::vector<boost::json::object> schedules = {}) {
  // Shared by both handlers below, not copied into each (a node may have
  // thousands of tasks).
  auto shared =
    std::make_shared<const std::vector<task_status>>(std::move(all));
  auto answer = [shared, reply,
                 schedules = std::move(schedules)](const task_clocks& clocks) {
    http_response r;
    r.content_type = "application/json";
    auto out = make_status_answer(*shared, clocks);
    out.schedules = schedules;
    r.body = status_answer_json(out);
    reply.send(std::move(r));
  };
  if (!stats)
    return answer({});
  auto got = [=](task_clocks& clocks) { answer(clocks); };
  // No statistics: no times.
  auto failed = [=](caf::error&) { answer({}); };
  if (task_id.empty())
    self->request(stats, node_request_timeout, clock_atom::value)
      .then(got, failed);
  else
    self->request(stats, node_request_timeout, clock_atom::value, task_id)
      .then(got, failed);
}

void status(const local_api_context& ctx, std::string task_id,
            http_reply reply) {
  ctx.sys->spawn([door = ctx.door, stats = ctx.stats,
                  task_id = std::move(task_id),
                  reply](caf::event_based_actor* self) {
    if (task_id.empty())
      self->request(door, node_request_timeout, status_atom::value)
        .then(
          [=](std::vector<task_status>& all) {
            // The schedules' next runs go under the table.
            auto tasks =
              std::make_shared<std::vector<task_status>>(std::move(all));
            self
              ->request(door, node_request_timeout, schedule_atom::value,
                        schedule_request{})
              .then(
                [=](std::vector<schedule_info>& list) {
                  std::vector<boost::json::object> schedules;
                  for (auto& x : list)
                    schedules.push_back(schedule_record(x));
                  answer_status(self, stats, std::move(*tasks), {}, reply,
                                std::move(schedules));
                },
                [=](caf::error&) {
                  answer_status(self, stats, std::move(*tasks), {}, reply);
                });
          },
          [=](caf::error& err) { reply.send(error_answer(err)); });
    else
      self->request(door, node_request_timeout, status_atom::value, task_id)
        .then(
          [=](task_status& one) {
            answer_status(self, stats, {std::move(one)}, task_id, reply);
          },
          [=](caf::error& err) { reply.send(error_answer(err)); });
  });
}

/// The answers of one batch, in the order of its tasks.
struct submit_batch {
  explicit submit_batch(std::size_t n, http_reply r)
    : results(n), pending(n), reply(std::move(r)) {}

  void done(std::size_t i, boost::json::object result) {
    results[i] = std::move(result);
    if (--pending == 0)
      reply.send(json_answer(200, results));
  }

  boost::json::array results;
  std::size_t pending;
  http_reply reply;
};

void submit(const local_api_context& ctx, const std::string& body,
            http_reply reply) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(body, ec);
  if (ec || !doc.is_object())
    return reply.send(bad_request("expected a JSON object"));
  auto& o = doc.get_object();
  bool replace = false;
  if (auto* r = o.if_contains("replace")) {
    if (!r->is_bool())
      return reply.send(bad_request("replace: expected true or false"));
    replace = r->get_bool();
  }
  auto* tasks = o.if_contains("tasks");
  if (!tasks || !tasks->is_array() || tasks->get_array().empty() ||
      tasks->get_array().size() > local_submit_batch)
    return reply.send(bad_request("tasks: expected 1 to " +
                                  std::to_string(local_submit_batch) +
                                  " task texts"));
  std::vector<std::string> texts;
  for (auto& t : tasks->get_array()) {
    if (!t.is_string())
      return reply.send(bad_request("tasks: expected strings"));
    texts.emplace_back(t.get_string());
  }
  ctx.sys->spawn([door = ctx.door, texts = std::move(texts), replace,
                  reply](caf::event_based_actor* self) mutable {
    auto batch = std::make_shared<submit_batch>(texts.size(), reply);
    for (std::size_t i = 0; i < texts.size(); ++i)
      self
        ->request(door, node_request_timeout, submit_json_atom::value,
                  std::move(texts[i]), replace)
        .then(
          [=](std::string& id) {
            batch->done(i, boost::json::object{{"id", std::move(id)}});
          },
          [=](caf::error& err) {
            if (err.category() == protocol_error_category)
              batch->done(i,
                          boost::json::object{{"rejected", error_text(err)}});
            else
              batch->done(i, boost::json::object{
                               {"failed", error_text(err)},
                               {"timeout", err == caf::sec::request_timeout}});
          });
  });
}

void control(const local_api_context& ctx, control_request req,
             http_reply reply) {
  // The server admits only peers running as this user (SO_PEERCRED), so
  // that uid is the peer's; the door's audit line names it.
  auto who =
    "local control socket client (uid " + std::to_string(::geteuid()) + ")";
  ctx.sys->spawn([door = ctx.door, who = std::move(who), req = std::move(req),
                  reply](caf::event_based_actor* self) {
    self->request(door, node_request_timeout, as_client_atom::value, who, req)
      .then(
        [=](bool took_effect) {
          reply.send(json_answer(
            200, boost::json::object{{"took_effect", took_effect}}));
        },
        [=](caf::error& err) { reply.send(error_answer(err)); });
  });
}

} // namespace

std::optional<control_request> control_request_for(std::string_view action,
                                                   std::string task_id) {
  if (auto a = task_control_named(action))
    return control_request{*a, std::move(task_id)};
  return std::nullopt;
}

http_server_options local_api_server_options(const std::string& path) {
  http_server_options opts;
  opts.unix_path = path;
  opts.peer_uid = ::geteuid();
  opts.max_connections = 16;
  // Every byte of a task text may need a \u00XX escape in the batch.
  opts.limits.max_body = 6 * wire::max_task_json_bytes + (64u << 10);
  // The door's own requests end within node_request_timeout; a batch's
  // answer follows the last of them.
  opts.answer_timeout = node_request_timeout + std::chrono::seconds{5};
  return opts;
}

void handle_local_request(const local_api_context& ctx, const http_request& req,
                          http_reply reply) {
  static constexpr std::string_view status_path = "/v1/status";
  static constexpr std::string_view tasks_path = "/v1/tasks/";
  const auto& path = req.path;
  if (path.compare(0, tasks_path.size(), tasks_path) == 0) {
    // /v1/tasks/ID/ACTION (the id may hold a '/': the action is last)
    auto rest = path.substr(tasks_path.size());
    auto slash = rest.rfind('/');
    auto control_req =
      slash == std::string::npos || slash == 0
        ? std::nullopt
        : control_request_for(std::string_view{rest}.substr(slash + 1),
                              rest.substr(0, slash));
    if (!control_req)
      return reply.send(text_response(404, "not found: " + path));
    if (req.method != "POST")
      return reply.send(text_response(405, "use POST"));
    return control(ctx, std::move(*control_req), std::move(reply));
  }
  if (path == "/v1/submit") {
    if (req.method != "POST")
      return reply.send(text_response(405, "use POST"));
    return submit(ctx, req.body, std::move(reply));
  }
  if (path.compare(0, status_path.size(), status_path) == 0) {
    auto rest = path.substr(status_path.size());
    if (req.method != "GET")
      return reply.send(text_response(405, "use GET"));
    if (rest.empty())
      return status(ctx, {}, std::move(reply));
    if (rest.front() == '/' && rest.size() > 1)
      return status(ctx, rest.substr(1), std::move(reply));
  }
  reply.send(text_response(404, "not found: " + path));
}

} // namespace tasksup::app
