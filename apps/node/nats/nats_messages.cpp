#include "nats_messages.hpp"

#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/json_writer.hpp"
#include "tasksup/supervisor/trigger.hpp"

#include <boost/json/serialize.hpp>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <vector>

namespace tasksup::app {

namespace {

error refused(std::string what) {
  return error{"submission", "", std::move(what)};
}

} // namespace

expected<intake_task> read_submission(std::string_view payload,
                                      std::string_view msg_id,
                                      std::uint64_t stream_seq) {
  if (payload.size() > max_submission_bytes)
    return refused("the message has " + std::to_string(payload.size()) +
                   " bytes, more than the " +
                   std::to_string(max_submission_bytes) + " a task may have");
  // As a task file is read: depth bounded, a duplicate key refused (the
  // node would refuse the task's text anyway, after the intake).
  auto parsed = parse_json_text(payload, "submission");
  if (!parsed)
    return parsed.error();
  auto& doc = *parsed;
  if (!doc.is_object())
    return refused("the message is not a JSON object (a task or a workflow)");
  auto& task = doc.get_object();
  intake_task out;
  if (auto* id = task.if_contains("id")) {
    if (!id->is_string())
      return error{"submission", "/id", "expected a string"};
    out.id = std::string{id->get_string()};
  } else {
    out.id = msg_id.empty() ? "nats-" + std::to_string(stream_seq)
                            : trigger_task_id(msg_id);
    task["id"] = out.id;
  }
  out.json = boost::json::serialize(doc);
  return out;
}

std::string_view to_string(intake_verdict x) noexcept {
  switch (x) {
    case intake_verdict::ack:
      return "ack";
    case intake_verdict::retry:
      return "retry";
    case intake_verdict::poison:
      return "poison";
  }
  return "?";
}

intake_verdict verdict_for(const caf::error& err) noexcept {
  if (!err || is_error(err, protocol_error::duplicate_task))
    return intake_verdict::ack;
  if (is_error(err, protocol_error::invalid_task) ||
      is_error(err, protocol_error::unknown_runtime) ||
      is_error(err, protocol_error::invalid_rules))
    return intake_verdict::poison;
  // The journal, leadership, a limit, a timeout: another time may do.
  return intake_verdict::retry;
}

std::string event_subject(std::string_view prefix, std::string_view task_id) {
  std::string out{prefix};
  out += '.';
  auto start = out.size();
  out += task_id;
  for (auto i = start; i < out.size(); ++i)
    if (out[i] == '.' &&
        (i == start || i + 1 == out.size() || out[i + 1] == '.'))
      out[i] = '_';
  return out;
}

std::string rfc3339_utc(double ts) {
  auto whole = std::floor(ts);
  auto ms = static_cast<int>(std::lround((ts - whole) * 1000));
  auto secs = static_cast<std::time_t>(whole);
  if (ms == 1000) {
    ms = 0;
    ++secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", ms);
  return buf;
}

std::string cloud_event(const event& ev, std::string_view id,
                        std::string_view source) {
  json_writer w;
  w.begin_object();
  w.key("specversion");
  w.raw_string("1.0");
  w.key("id");
  w.string(id);
  w.key("source");
  w.string(source);
  w.key("type");
  w.raw_string("dev.tasksup." + std::string{to_string(ev.kind)});
  w.key("subject");
  w.string(ev.task_id);
  w.key("time");
  w.raw_string(rfc3339_utc(ev.ts));
  w.key("datacontenttype");
  w.raw_string("application/json");
  w.key("data");
  w.raw(ev.json().empty() ? std::string_view{"null"} : ev.json());
  w.end_object();
  return w.take();
}

} // namespace tasksup::app

namespace tasksup::app {

namespace {

/// The next `sep`-separated token of `s` from `pos` (moved past it).
std::string_view next_token(std::string_view s, std::size_t& pos,
                            char sep = '.') {
  auto end = s.find(sep, pos);
  if (end == std::string_view::npos)
    end = s.size();
  auto token = s.substr(pos, end - pos);
  pos = end + 1;
  return token;
}

} // namespace

std::uint64_t stream_seq_of_reply(std::string_view reply) {
  std::vector<std::string_view> tokens;
  for (std::size_t pos = 0; pos <= reply.size();)
    tokens.push_back(next_token(reply, pos));
  if (tokens.size() < 9 || tokens[0] != "$JS" || tokens[1] != "ACK")
    return 0;
  // 9 tokens: the first form; 11 or more: a domain and an account hash
  // come before the stream (and a random token may end it).
  auto seq = tokens.size() == 9    ? tokens[5]
             : tokens.size() >= 11 ? tokens[7]
                                   : "";
  if (seq.empty() || seq.size() > 19)
    return 0;
  std::uint64_t out = 0;
  for (char c : seq) {
    if (c < '0' || c > '9')
      return 0;
    out = out * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return out;
}

bool subject_matches(std::string_view pattern, std::string_view subject) {
  std::size_t p = 0;
  std::size_t s = 0;
  while (p <= pattern.size() && s <= subject.size()) {
    auto want = next_token(pattern, p);
    if (want == ">")
      return true;
    auto have = next_token(subject, s);
    if (want != "*" && want != have)
      return false;
    if (p > pattern.size() || s > subject.size())
      return p > pattern.size() && s > subject.size();
  }
  return false;
}

std::vector<std::string> split_nats_urls(std::string_view url) {
  std::vector<std::string> out;
  for (std::size_t pos = 0; pos <= url.size();) {
    auto one = next_token(url, pos, ',');
    auto first = one.find_first_not_of(" \t");
    if (first != std::string_view::npos)
      out.emplace_back(
        one.substr(first, one.find_last_not_of(" \t") - first + 1));
  }
  return out;
}

std::string redact_nats_url(std::string_view url) {
  std::string out;
  for (std::size_t pos = 0; pos <= url.size();) {
    auto one = next_token(url, pos, ',');
    auto scheme = one.find("://");
    auto at = one.rfind('@');
    if (scheme != std::string_view::npos && at != std::string_view::npos &&
        at > scheme) {
      auto user = one.substr(scheme + 3, at - scheme - 3);
      auto colon = user.find(':');
      out += one.substr(0, scheme + 3);
      out += user.substr(0, colon);
      if (colon != std::string_view::npos)
        out += ":***";
      out += one.substr(at);
    } else {
      out += one;
    }
    if (pos <= url.size())
      out += ',';
  }
  return out;
}

} // namespace tasksup::app
