#include "dashboard.hpp"

#include "dashboard_auth.hpp"
#include "local_api.hpp"
#include "node_address.hpp"
#include "status_record.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace tasksup::app {

namespace {

/// How long a request waits for the node's actors.
constexpr std::chrono::seconds actor_timeout{5};

http_response json_response(int status, std::string body) {
  http_response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

/// A JSON string literal of plain text (messages we write ourselves plus
/// ids, escaped).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

http_response asset(std::string_view type, std::string_view body) {
  http_response r;
  r.content_type = std::string{type};
  r.body = std::string{body};
  r.headers.emplace_back("Cache-Control", "no-cache");
  // Only our own script and style; no inline code, no other origin.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; "
                         "frame-ancestors 'none'");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  return r;
}

http_response method_not_allowed(std::string allow) {
  auto r = text_response(405, "method not allowed; use " + allow);
  r.headers.emplace_back("Allow", std::move(allow));
  return r;
}

/// The Host header's host part ("127.0.0.1", "localhost", "::1").
std::string host_part(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string::npos ? host : host.substr(1, close - 1);
  }
  auto colon = host.rfind(':');
  return colon == std::string::npos ? host : host.substr(0, colon);
}

http_response actor_error(const caf::error& err) {
  bool unknown = is_error(err, protocol_error::unknown_task);
  return json_response(
    unknown ? 404 : 503,
    "{\"ok\":false,\"message\":" + json_string(error_text(err)) + "}");
}

/// Asks `dest` with `xs` from a short-lived actor and answers `reply` with
/// `make(text)` or the error; the server's thread does not wait.
template<class Make, class... Ts>
void ask_text(const dashboard_context& ctx, const stats_actor& dest,
              http_reply reply, Make make, Ts... xs) {
  ctx.sys->spawn([=](caf::event_based_actor* self) {
    self->request(dest, actor_timeout, xs...)
      .then([=](std::string& text) { reply.send(make(std::move(text))); },
            [=](caf::error& err) { reply.send(actor_error(err)); });
  });
}

template<class... Ts>
void ask_json(const dashboard_context& ctx, const stats_actor& dest,
              http_reply reply, Ts... xs) {
  ctx.sys->spawn([=](caf::event_based_actor* self) {
    self->request(dest, actor_timeout, xs...)
      .then(
        [=](std::string& text) {
          reply.send(json_response(200, std::move(text)));
        },
        [=](caf::error& err) { reply.send(actor_error(err)); });
  });
}

/// GET /api/schedules: the node's schedules (`schedule_record`'s objects).
void schedules(const dashboard_context& ctx, http_reply reply) {
  ctx.sys->spawn([=](caf::event_based_actor* self) {
    self
      ->request(ctx.registry, actor_timeout, schedule_atom::value,
                schedule_request{})
      .then(
        [=](std::vector<schedule_info>& list) {
          boost::json::array out;
          for (auto& x : list)
            out.emplace_back(schedule_record(x));
          reply.send(json_response(200, boost::json::serialize(out)));
        },
        [=](caf::error& err) { reply.send(actor_error(err)); });
  });
}

void control(const dashboard_context& ctx, const http_request& req,
             const std::string& task_id, const std::string& action,
             http_reply reply) {
  // Same origin only: a page elsewhere cannot press the buttons (the
  // cookie is SameSite=Strict too, and the header needs a preflight).
  if (auto* origin = req.header("origin")) {
    auto* host = req.header("host");
    if (!host || *origin != "http://" + *host)
      return reply.send(
        text_response(403, "cross-origin control request refused"));
  }
  if (!req.header(csrf_header))
    return reply.send(text_response(403, "control requests need the "
                                         "X-Tasksup-CSRF header (the "
                                         "dashboard sends it)"));
  // The caller checked the action's name. Through the door, audited as the
  // dashboard's: whoever shows the token.
  auto control_req = *control_request_for(action, task_id);
  ctx.sys->spawn([=](caf::event_based_actor* self) {
    self
      ->request(ctx.door, actor_timeout, as_client_atom::value,
                std::string{"dashboard user (HTTP token)"}, control_req)
      .then(
        [=](bool took_effect) {
          auto message = action +
                         (took_effect ? " done for " : " had no effect on ") +
                         task_id;
          reply.send(json_response(
            200, std::string{"{\"ok\":"} + (took_effect ? "true" : "false") +
                   ",\"message\":" + json_string(message) + "}"));
        },
        [=](caf::error& err) { reply.send(actor_error(err)); });
  });
}

// -- server-sent events ---------------------------------------------------

using sse_tick_atom = caf::atom_constant<caf::atom("ssetick")>;

/// How often a stream tells its client which tasks changed (at most).
constexpr std::chrono::milliseconds sse_interval{250};
/// A comment line after this many quiet ticks keeps proxies and the
/// client's EventSource from timing out, and finds a client that left.
constexpr int sse_ping_ticks = 60;
/// Task ids in one message at most; beyond, the message says "all".
constexpr std::size_t sse_max_ids = 100;

struct sse_state {
  http_reply reply;
  registry_actor registry;
  std::set<std::string> changed;
  bool overflow = false;
  int quiet = 0;
  static inline const char* name = "tasksup.http_stream";
};

/// A stream is a subscriber that also ticks.
using sse_actor = subscriber_actor::extend<caf::reacts_to<sse_tick_atom>>;
using sse_pointer = sse_actor::stateful_pointer<sse_state>;

/// One event stream: subscribed to the registry's events, it collects the
/// ids of tasks that changed and sends them every `sse_interval`; it ends
/// when its connection does (the server drops a client that falls behind).
sse_actor::behavior_type sse_behavior(sse_pointer self, registry_actor registry,
                                      http_reply reply) {
  self->state.reply = reply;
  self->state.registry = registry;
  auto me = caf::actor_cast<subscriber_actor>(self);
  self->monitor(registry);
  self->set_down_handler([=](const caf::down_msg&) {
    self->state.reply.close();
    self->quit();
  });
  self->request(registry, actor_timeout, subscribe_atom::value, me)
    .then(
      [=](bool) {
        http_response head;
        head.content_type = "text/event-stream; charset=utf-8";
        head.headers.emplace_back("Cache-Control", "no-store");
        // Reconnect after 5 s; `hello` tells the page to load afresh (it
        // missed what changed before the subscription).
        head.body = "retry: 5000\nevent: hello\ndata: {}\n\n";
        self->state.reply.open_stream(std::move(head));
        self->delayed_send(self, sse_interval, sse_tick_atom::value);
      },
      [=](caf::error& err) {
        self->state.reply.send(actor_error(err));
        self->quit();
      });
  return {
    [=](event_atom, const event& ev) {
      auto& st = self->state;
      if (st.changed.size() < sse_max_ids)
        st.changed.insert(ev.task_id);
      else if (st.changed.count(ev.task_id) == 0)
        st.overflow = true;
    },
    // The registry sends no `dropped`; a stream takes it as a subscriber.
    [=](dropped_atom, const std::string&) {
      self->state.reply.close();
      self->quit();
    },
    [=](sse_tick_atom) {
      auto& st = self->state;
      bool alive = st.reply.open();
      if (alive && (!st.changed.empty() || st.overflow)) {
        std::string data = "event: change\ndata: {\"all\":";
        data += st.overflow ? "true" : "false";
        data += ",\"tasks\":[";
        bool first = true;
        for (auto& id : st.changed) {
          if (!first)
            data += ',';
          first = false;
          data += json_string(id);
        }
        data += "]}\n\n";
        st.changed.clear();
        st.overflow = false;
        st.quiet = 0;
        alive = st.reply.push(std::move(data));
      } else if (alive && ++st.quiet >= sse_ping_ticks) {
        st.quiet = 0;
        alive = st.reply.push(": ping\n\n");
      }
      if (!alive) {
        caf::anon_send(st.registry, unsubscribe_atom::value,
                       caf::actor_cast<subscriber_actor>(self));
        self->quit();
        return;
      }
      self->delayed_send(self, sse_interval, sse_tick_atom::value);
    },
  };
}

/// The page at `path` with no query: where a login sends the browser.
std::string without_query(const http_request& req) {
  return req.path.empty() || req.path.front() != '/' ? "/" : req.path;
}

/// 401 with where the token is.
http_response unauthorized(const dashboard_context& ctx) {
  auto r = text_response(
    401, "this node's HTTP server needs its token: open the dashboard URL "
         "`tasksup serve` logged at start (it ends in ?token=...), or send "
         "`Authorization: Bearer TOKEN` with the token in " +
           ctx.token_path + " (readable by the node's user only)");
  r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"tasksup\"");
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

/// Parses a whole decimal number in [lo, hi].
std::optional<std::uint64_t> parse_count(const std::string& text,
                                         std::uint64_t lo, std::uint64_t hi) {
  if (text.empty() || text.size() > 9)
    return std::nullopt;
  std::uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (n < lo || n > hi)
    return std::nullopt;
  return n;
}

} // namespace

std::string http_server_metrics(const http_server_stats& s) {
  std::string out;
  auto add = [&out](const char* name, const char* type, const char* help,
                    std::size_t value) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name +
           " " + type + "\n" + name + " " + std::to_string(value) + "\n";
  };
  add("tasksup_http_requests_total", "counter",
      "Complete HTTP requests the dashboard server read.", s.requests);
  add("tasksup_http_rejected_total", "counter",
      "HTTP requests refused as malformed or over a limit, and connections "
      "refused at the connection limit.",
      s.rejected);
  add("tasksup_http_timed_out_total", "counter",
      "HTTP requests not complete, or not answered, in time.", s.timed_out);
  add("tasksup_http_evicted_total", "counter",
      "Idle HTTP connections closed to admit a new one.", s.evicted);
  add("tasksup_http_streams_dropped_total", "counter",
      "Event streams dropped because their client read too slowly.",
      s.streams_dropped);
  add("tasksup_http_connections", "gauge", "Open HTTP connections.",
      s.connections);
  add("tasksup_http_streams", "gauge",
      "Open event streams (/api/stream), included in the connections.",
      s.streams);
  return out;
}

void handle_node_request(const dashboard_context& ctx, const http_request& req,
                         http_reply reply) {
  // Signed deliveries from a sender elsewhere (no browser, no cookie: the
  // Host check against DNS rebinding is not theirs).
  if (is_webhook_path(req.path))
    return handle_webhook(ctx.hooks, req, std::move(reply));
  if (!ctx.allow_remote) {
    // A page on another site that resolves its own name to 127.0.0.1 (DNS
    // rebinding) sends its own name as Host: refuse it.
    auto* host = req.header("host");
    if (host && !is_loopback_host(host_part(*host)))
      return reply.send(
        text_response(403, "this node serves loopback host names only"));
  }
  bool get = req.method == "GET" || req.method == "HEAD";
  // Login: the token in the URL becomes a cookie and leaves the URL (and
  // so the history, the address bar and any Referer).
  if (auto given = req.query_param("token"); given && get) {
    if (!same_secret(*given, ctx.token))
      return reply.send(unauthorized(ctx));
    http_response r;
    r.status = 303;
    r.body = "logged in\n";
    r.headers.emplace_back("Location", without_query(req));
    r.headers.emplace_back("Set-Cookie",
                           http_token_cookie(req.local_port) + "=" + ctx.token +
                             "; Path=/; HttpOnly; SameSite=Strict; "
                             "Max-Age=2592000");
    r.headers.emplace_back("Cache-Control", "no-store");
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    return reply.send(std::move(r));
  }
  auto auth = check_http_auth(req, ctx.token);
  if (auth != http_auth::bearer && auth != http_auth::cookie)
    return reply.send(unauthorized(ctx));
  const auto& path = req.path;
  static constexpr std::string_view api_tasks = "/api/tasks/";
  if (path.compare(0, api_tasks.size(), api_tasks) == 0 &&
      path.size() > api_tasks.size()) {
    auto rest = path.substr(api_tasks.size());
    auto slash = rest.rfind('/');
    if (slash != std::string::npos) {
      auto action = rest.substr(slash + 1);
      auto id = rest.substr(0, slash);
      if (action != "stop" && action != "kill" && action != "retry-now" &&
          action != "fallback-now" && action != "pause" && action != "resume")
        return reply.send(text_response(404, "no such action: " + action));
      if (req.method != "POST")
        return reply.send(method_not_allowed("POST"));
      return control(ctx, req, id, action, reply);
    }
    if (!get)
      return reply.send(method_not_allowed("GET, HEAD"));
    return ask_json(ctx, ctx.stats, reply, view_atom::value, rest);
  }
  if (path == "/" || path == "/index.html" || path == "/dashboard.js" ||
      path == "/dashboard.css" || path == "/metrics" || path == "/api/tasks" ||
      path == "/api/agents" || path == "/api/stream" ||
      path == "/api/schedules") {
    if (!get)
      return reply.send(method_not_allowed("GET, HEAD"));
  } else {
    return reply.send(text_response(404, "not found: " + path));
  }
  if (path == "/" || path == "/index.html")
    return reply.send(asset("text/html; charset=utf-8", dashboard_html));
  if (path == "/dashboard.js")
    return reply.send(asset("text/javascript; charset=utf-8", dashboard_js));
  if (path == "/dashboard.css")
    return reply.send(asset("text/css; charset=utf-8", dashboard_css));
  if (path == "/metrics")
    return ask_text(
      ctx, ctx.stats, reply,
      // The server's figures now, on its own thread.
      [server = ctx.server_stats ? http_server_metrics(ctx.server_stats())
                                 : std::string{}](std::string text) {
        http_response r;
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.body = std::move(text) + server;
        return r;
      },
      metrics_atom::value);
  if (path == "/api/stream") {
    if (req.method == "HEAD")
      return reply.send(text_response(200, ""));
    ctx.sys->spawn(sse_behavior, ctx.registry, reply);
    return;
  }
  if (path == "/api/schedules")
    return schedules(ctx, reply);
  if (path == "/api/tasks") {
    std::uint64_t limit = default_task_page;
    if (auto l = req.query_param("limit")) {
      auto n = parse_count(*l, 1, max_task_page);
      if (!n)
        return reply.send(text_response(400, "limit: expected 1 to " +
                                               std::to_string(max_task_page)));
      limit = *n;
    }
    std::string after = req.query_param("after").value_or("");
    if (after.size() > 256)
      return reply.send(text_response(400, "after: a task id, too long"));
    return ask_json(ctx, ctx.stats, reply, view_atom::value, limit, after);
  }
  // /api/agents
  double window_s = 0;
  if (auto w = req.query_param("window")) {
    char* end = nullptr;
    window_s = std::strtod(w->c_str(), &end);
    if (w->empty() || end != w->c_str() + w->size() || !(window_s >= 0) ||
        window_s > 1e9)
      return reply.send(
        text_response(400, "window: expected seconds, 0 to 1e9"));
  }
  ask_json(ctx, ctx.stats, reply, agents_atom::value, window_s);
}

} // namespace tasksup::app
