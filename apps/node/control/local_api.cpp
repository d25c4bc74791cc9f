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

#include <charconv>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
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

/// Answers `reply` with the task `task_id` names and the times the node's
/// statistics keep, asked of `stats` as typed values.
void answer_status(caf::event_based_actor* self, const stats_actor& stats,
                   task_status one, const std::string& task_id,
                   const http_reply& reply) {
  auto answer = [one = std::move(one), reply](const task_clocks& clocks) {
    http_response r;
    r.content_type = "application/json";
    r.body = status_answer_json(make_status_answer({one}, clocks));
    reply.send(std::move(r));
  };
  if (!stats)
    return answer({});
  // No statistics: no times.
  self->request(stats, node_request_timeout, clock_atom::value, task_id)
    .then([=](task_clocks& clocks) { answer(clocks); },
          [=](caf::error&) { answer({}); });
}

/// `GET /v1/status/ID`: one task.
void status(const local_api_context& ctx, std::string task_id,
            http_reply reply) {
  ctx.sys->spawn([door = ctx.door, stats = ctx.stats,
                  task_id = std::move(task_id),
                  reply](caf::event_based_actor* self) {
    self->request(door, node_request_timeout, status_atom::value, task_id)
      .then(
        [=](task_status& one) {
          answer_status(self, stats, std::move(one), task_id, reply);
        },
        [=](caf::error& err) { reply.send(error_answer(err)); });
  });
}

/// `GET /v1/status?...`: a page of the tasks, with the schedules' next runs
/// (shown under the table).
void status_list(const local_api_context& ctx, status_query q,
                 http_reply reply) {
  ctx.sys->spawn([door = ctx.door, q = std::move(q),
                  reply](caf::event_based_actor* self) {
    self->request(door, node_request_timeout, status_atom::value, q)
      .then(
        [=](status_page& page) {
          auto out = std::make_shared<status_answer>(make_status_answer(page));
          auto send = [out, reply] {
            http_response r;
            r.content_type = "application/json";
            r.body = status_answer_json(*out);
            reply.send(std::move(r));
          };
          self
            ->request(door, node_request_timeout, schedule_atom::value,
                      schedule_request{})
            .then(
              [=](std::vector<schedule_info>& list) {
                for (auto& x : list)
                  out->schedules.push_back(schedule_record(x));
                send();
              },
              [=](caf::error&) { send(); });
        },
        [=](caf::error& err) { reply.send(error_answer(err)); });
  });
}

/// The page `req`'s query asks for (limit, after, agent, state, outcome),
/// or the error text.
std::variant<status_query, std::string> page_query(const http_request& req) {
  status_page_options page;
  status_filter filter;
  if (auto limit = req.query_param("limit")) {
    std::uint64_t n = 0;
    auto [end, ec] =
      std::from_chars(limit->data(), limit->data() + limit->size(), n);
    if (ec != std::errc{} || end != limit->data() + limit->size() ||
        n > max_status_limit)
      return "limit: expected 0 to " + std::to_string(max_status_limit);
    page.limit = static_cast<std::uint32_t>(n);
  }
  page.after = req.query_param("after").value_or("");
  filter.agent = req.query_param("agent").value_or("");
  if (auto err = check_page_options(page))
    return *err;
  if (auto err = check_agent_filter(filter.agent))
    return *err;
  if (auto states = req.query_param("state"))
    if (auto err = parse_state_filter({*states}, filter.states))
      return *err;
  if (auto outcomes = req.query_param("outcome"))
    if (auto err = parse_outcome_filter({*outcomes}, filter.outcomes))
      return *err;
  return make_status_query(page, filter);
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
    if (rest.empty()) {
      auto q = page_query(req);
      if (auto* err = std::get_if<std::string>(&q))
        return reply.send(bad_request(std::move(*err)));
      return status_list(ctx, std::move(std::get<status_query>(q)),
                         std::move(reply));
    }
    if (rest.front() == '/' && rest.size() > 1)
      return status(ctx, rest.substr(1), std::move(reply));
  }
  reply.send(text_response(404, "not found: " + path));
}

} // namespace tasksup::app
