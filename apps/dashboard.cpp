#include "dashboard.hpp"

#include "node_address.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/scoped_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
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

/// Asks `dest` and returns the text answer, or an error response.
template<class... Ts>
std::pair<std::optional<std::string>, http_response>
ask_text(const dashboard_context& ctx, const caf::actor& dest, Ts&&... xs) {
  caf::scoped_actor self{*ctx.sys};
  std::pair<std::optional<std::string>, http_response> out;
  self->request(dest, actor_timeout, std::forward<Ts>(xs)...)
    .receive([&](std::string& text) { out.first = std::move(text); },
             [&](caf::error& err) {
               auto text = error_text(err);
               bool unknown = err.category() == protocol_error_category &&
                              err.code() == static_cast<std::uint8_t>(
                                              protocol_error::unknown_task);
               out.second = json_response(
                 unknown ? 404 : 503,
                 "{\"ok\":false,\"message\":" + json_string(text) + "}");
             });
  return out;
}

http_response control(const dashboard_context& ctx, const http_request& req,
                      const std::string& task_id, const std::string& action) {
  if (!req.header(csrf_header))
    return text_response(403, "control requests need the X-Tasksup-CSRF "
                              "header (the dashboard sends it)");
  if (auto* origin = req.header("origin")) {
    auto* host = req.header("host");
    if (!host || *origin != "http://" + *host)
      return text_response(403, "cross-origin control request refused");
  }
  caf::scoped_actor self{*ctx.sys};
  http_response out;
  auto on_bool = [&](bool took_effect) {
    auto message =
      action + (took_effect ? " done for " : " had no effect on ") + task_id;
    out = json_response(200, std::string{"{\"ok\":"} +
                               (took_effect ? "true" : "false") +
                               ",\"message\":" + json_string(message) + "}");
  };
  auto on_error = [&](caf::error& err) {
    bool unknown =
      err.category() == protocol_error_category &&
      err.code() == static_cast<std::uint8_t>(protocol_error::unknown_task);
    out = json_response(
      unknown ? 404 : 503,
      "{\"ok\":false,\"message\":" + json_string(error_text(err)) + "}");
  };
  if (action == "stop" || action == "kill")
    self
      ->request(ctx.registry, actor_timeout, stop_atom::value, task_id,
                action == "kill" ? stop_mode::kill : stop_mode::cancel)
      .receive(on_bool, on_error);
  else if (action == "retry-now")
    self->request(ctx.registry, actor_timeout, retry_now_atom::value, task_id)
      .receive(on_bool, on_error);
  else
    self
      ->request(ctx.registry, actor_timeout, force_fallback_atom::value,
                task_id)
      .receive(on_bool, on_error);
  return out;
}

} // namespace

http_response handle_node_request(const dashboard_context& ctx,
                                  const http_request& req) {
  if (!ctx.allow_remote) {
    // A page on another site that resolves its own name to 127.0.0.1 (DNS
    // rebinding) sends its own name as Host: refuse it.
    auto* host = req.header("host");
    if (host && !is_loopback_host(host_part(*host)))
      return text_response(403, "this node serves loopback host names only");
  }
  const auto& path = req.path;
  bool get = req.method == "GET" || req.method == "HEAD";
  static constexpr std::string_view api_tasks = "/api/tasks/";
  if (path.compare(0, api_tasks.size(), api_tasks) == 0 &&
      path.size() > api_tasks.size()) {
    auto rest = path.substr(api_tasks.size());
    auto slash = rest.rfind('/');
    if (slash != std::string::npos) {
      auto action = rest.substr(slash + 1);
      auto id = rest.substr(0, slash);
      if (action != "stop" && action != "kill" && action != "retry-now" &&
          action != "fallback-now")
        return text_response(404, "no such action: " + action);
      if (req.method != "POST")
        return method_not_allowed("POST");
      return control(ctx, req, id, action);
    }
    if (!get)
      return method_not_allowed("GET, HEAD");
    auto [text, err] = ask_text(ctx, ctx.stats, view_atom::value, rest);
    return text ? json_response(200, std::move(*text)) : err;
  }
  if (path == "/" || path == "/index.html" || path == "/dashboard.js" ||
      path == "/dashboard.css" || path == "/metrics" || path == "/api/tasks" ||
      path == "/api/agents") {
    if (!get)
      return method_not_allowed("GET, HEAD");
  } else {
    return text_response(404, "not found: " + path);
  }
  if (path == "/" || path == "/index.html")
    return asset("text/html; charset=utf-8", dashboard_html);
  if (path == "/dashboard.js")
    return asset("text/javascript; charset=utf-8", dashboard_js);
  if (path == "/dashboard.css")
    return asset("text/css; charset=utf-8", dashboard_css);
  if (path == "/metrics") {
    auto [text, err] = ask_text(ctx, ctx.stats, metrics_atom::value);
    if (!text)
      return err;
    http_response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = std::move(*text);
    return r;
  }
  if (path == "/api/tasks") {
    auto [text, err] = ask_text(ctx, ctx.stats, view_atom::value);
    return text ? json_response(200, std::move(*text)) : err;
  }
  // /api/agents
  double window_s = 0;
  if (auto w = req.query_param("window")) {
    char* end = nullptr;
    window_s = std::strtod(w->c_str(), &end);
    if (w->empty() || end != w->c_str() + w->size() || !(window_s >= 0) ||
        window_s > 1e9)
      return text_response(400, "window: expected seconds, 0 to 1e9");
  }
  auto [text, err] = ask_text(ctx, ctx.stats, agents_atom::value, window_s);
  return text ? json_response(200, std::move(*text)) : err;
}

} // namespace tasksup::app
