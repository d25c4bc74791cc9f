// Webhook triggers: reading a trigger file and its secret, and what a
// delivery does (docs/BEHAVIOUR.md, Triggers: matching). A payload is
// untrusted input from the network: every field is looked up by pointer and
// checked for its type, and what it puts into a task is bounded.

#include "tasksup/supervisor/trigger.hpp"

#include "config_reader.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/role.hpp"
#include "tasksup/supervisor/task_model.hpp"
#include "tasksup/supervisor/text.hpp"
#include "trigger_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

namespace tasksup {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

using detail::child;
using detail::quote;
using detail::reader;

constexpr trigger_source trigger_sources[] = {trigger_source::github,
                                              trigger_source::generic};

/// The longest GitHub login (39) with room for an app's "[bot]" suffix.
constexpr std::size_t max_login_bytes = 64;

/// The longest "owner/name" read: a 39-character owner, a 100-character
/// name.
constexpr std::size_t max_full_name_bytes = 140;

/// The longest URL and `author_association` read.
constexpr std::size_t max_url_bytes = 2048;

/// What replaces a NUL byte of payload text (U+FFFD).
constexpr std::string_view replacement_character = "\xEF\xBF\xBD";

// -- characters ---------------------------------------------------------------

bool is_alnum(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

bool is_id_char(char c) noexcept {
  return is_alnum(c) || c == '_' || c == '.' || c == '-';
}

char lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// Equal but for the case of ASCII letters: GitHub logins and label names
/// are case-insensitive.
bool equal_ignoring_case(std::string_view x, std::string_view y) noexcept {
  return x.size() == y.size() &&
         std::equal(x.begin(), x.end(), y.begin(),
                    [](char a, char b) { return lower(a) == lower(b); });
}

/// A GitHub login as `users` and `mention` name it: letters, digits and
/// hyphens, at most 39 (GitHub's rule, which keeps a mention a word).
bool valid_login(std::string_view str) noexcept {
  return !str.empty() && str.size() <= 39 &&
         std::all_of(str.begin(), str.end(),
                     [](char c) { return is_alnum(c) || c == '-'; });
}

/// "owner/name", each part from [A-Za-z0-9_.-].
bool valid_full_name(std::string_view str) noexcept {
  auto slash = str.find('/');
  if (str.size() > max_full_name_bytes || slash == 0 ||
      slash == std::string_view::npos || slash + 1 == str.size())
    return false;
  auto owner = str.substr(0, slash);
  auto name = str.substr(slash + 1);
  return std::all_of(owner.begin(), owner.end(), is_id_char) &&
         std::all_of(name.begin(), name.end(), is_id_char) && name != "." &&
         name != "..";
}

/// RFC 6901: "" or "/..." whose every `~` is `~0` or `~1`.
bool valid_pointer(std::string_view str) noexcept {
  if (!str.empty() && str.front() != '/')
    return false;
  for (std::size_t i = 0; i < str.size(); ++i)
    if (str[i] == '~' &&
        (i + 1 == str.size() || (str[i + 1] != '0' && str[i + 1] != '1')))
      return false;
  return true;
}

template<class Names>
bool contains(const Names& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// -- reading a trigger file ---------------------------------------------------

/// The secret in `file`, less one trailing newline. Only the file's name
/// goes into an error, never what it holds.
std::string read_secret(const reader& r, const std::string& file) {
  const std::string at = "/secret_file";
  // Opened without blocking and checked before reading, as config files
  // are: a FIFO named as the secret must not hang the node's start.
  int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    r.fail(at, "cannot open the secret file " + quote(file) + ": " +
                 std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    r.fail(at, "the secret file " + quote(file) + " is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_secret_bytes)
    r.fail(at, "the secret file " + quote(file) + " is larger than " +
                 std::to_string(max_secret_bytes) + " bytes");
  std::string secret;
  char buf[max_secret_bytes + 1];
  for (;;) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      r.fail(at, "cannot read the secret file " + quote(file) + ": " +
                   std::strerror(errno));
    if (n == 0)
      break;
    secret.append(buf, static_cast<std::size_t>(n));
    if (secret.size() > max_secret_bytes)
      r.fail(at, "the secret file " + quote(file) + " is larger than " +
                   std::to_string(max_secret_bytes) + " bytes");
  }
  // `echo secret > file` and editors end the file with a newline, which is
  // not part of the secret the sender was given.
  if (!secret.empty() && secret.back() == '\n')
    secret.pop_back();
  if (!secret.empty() && secret.back() == '\r')
    secret.pop_back();
  if (secret.empty())
    r.fail(at, "the secret file " + quote(file) + " is empty");
  return secret;
}

std::vector<std::string> string_list(const reader& r, const json::value& v,
                                     const std::string& path) {
  std::vector<std::string> out;
  const auto& arr = r.array(v, path);
  for (std::size_t i = 0; i < arr.size(); ++i)
    out.push_back(r.nonempty_string(arr[i], child(path, i)));
  return out;
}

github_match read_github_on(const reader& r, const json::object& on) {
  r.check_keys(on, "/on", {"event", "action", "label", "mention"});
  github_match out;
  out.event = r.string(r.required(on, "/on", "event"), "/on/event");
  if (!contains(github_trigger_events, out.event))
    r.fail("/on/event",
           "expected one of " + detail::join_quoted(github_trigger_events) +
             " (the events whose issue or pull request names the task), got " +
             quote(out.event));
  if (const auto* v = on.if_contains("action"))
    out.action = r.nonempty_string(*v, "/on/action");
  if (const auto* v = on.if_contains("label"))
    out.label = r.nonempty_string(*v, "/on/label");
  if (const auto* v = on.if_contains("mention")) {
    out.mention = r.string(*v, "/on/mention");
    if (out.mention.size() < 2 || out.mention.front() != '@' ||
        !valid_login(std::string_view{out.mention}.substr(1)))
      r.fail("/on/mention", "expected \"@\" and a GitHub login (letters, "
                            "digits and hyphens, at most 39), got " +
                              quote(out.mention));
    if (out.event != "issue_comment")
      r.fail("/on/mention", "only an \"issue_comment\" trigger has a mention "
                            "(it is looked for in the comment)");
  }
  return out;
}

generic_match read_generic_on(const reader& r, const json::object& on) {
  generic_match out;
  for (const auto& kv : on) {
    std::string pointer{kv.key().data(), kv.key().size()};
    auto path = child("/on", pointer);
    if (pointer.empty() || !valid_pointer(pointer))
      r.fail(path, "expected a JSON pointer such as \"/action\" as the key, "
                   "got " +
                     quote(pointer));
    out.fields.emplace_back(std::move(pointer), r.string(kv.value(), path));
  }
  return out;
}

trigger_allow read_allow(const reader& r, const json::value& v) {
  const auto& obj = r.object(v, "/allow");
  r.check_keys(obj, "/allow", {"author_association", "users"});
  trigger_allow out;
  if (const auto* x = obj.if_contains("author_association")) {
    out.author_associations = string_list(r, *x, "/allow/author_association");
    for (std::size_t i = 0; i < out.author_associations.size(); ++i)
      if (!contains(github_author_associations, out.author_associations[i]))
        r.fail(child("/allow/author_association", i),
               "expected one of " +
                 detail::join_quoted(github_author_associations) + ", got " +
                 quote(out.author_associations[i]));
  }
  if (const auto* x = obj.if_contains("users")) {
    out.users = string_list(r, *x, "/allow/users");
    for (std::size_t i = 0; i < out.users.size(); ++i)
      if (!valid_login(out.users[i]))
        r.fail(child("/allow/users", i),
               "expected a GitHub login (letters, digits and hyphens, at "
               "most 39), got " +
                 quote(out.users[i]));
  }
  if (out.author_associations.empty() && out.users.empty())
    r.fail("/allow", "admits no one: give \"author_association\" or "
                     "\"users\"");
  return out;
}

std::map<std::string, std::string> read_repos(const reader& r,
                                              const json::value& v) {
  const auto& obj = r.object(v, "/repos");
  std::map<std::string, std::string> out;
  for (const auto& kv : obj) {
    std::string name{kv.key().data(), kv.key().size()};
    auto path = child("/repos", name);
    if (!valid_full_name(name))
      r.fail(path, "expected a repository's full name (\"owner/name\") as "
                   "the key, got " +
                     quote(name));
    auto dir = r.nonempty_string(kv.value(), path);
    if (dir.front() != '/' || dir.find('\0') != std::string::npos)
      r.fail(path,
             "expected the absolute path of a local clone, got " + quote(dir));
    out.emplace(std::move(name), std::move(dir));
  }
  return out;
}

/// The names of the `{{...}}`s in `text`, in order; nullopt when one is not
/// closed.
std::optional<std::vector<std::string_view>>
placeholders_in(std::string_view text) {
  std::vector<std::string_view> out;
  for (auto at = text.find("{{"); at != std::string_view::npos;
       at = text.find("{{", at + 2)) {
    auto close = text.find("}}", at);
    if (close == std::string_view::npos)
      return std::nullopt;
    out.push_back(text.substr(at + 2, close - at - 2));
    at = close;
  }
  return out;
}

/// Whether `c` may be in the URL a report is POSTed to: printable ASCII
/// but space, quotes, backslash, braces (no placeholder) and angle
/// brackets.
bool config_url_char(char c) noexcept {
  return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '{' &&
         c != '}' && c != '<' && c != '>' && c != '`';
}

/// Whether `c` may be in a payload's URL given to a report command: what
/// an issue's URL holds, nothing a shell would read (no `$`, `&`, `;`,
/// quotes, parentheses or wildcards), so the value is safe even in a
/// script's text.
bool payload_url_char(char c) noexcept {
  return is_id_char(c) || c == ':' || c == '/' || c == '#' || c == '@' ||
         c == '%' || c == '=' || c == '+' || c == ',' || c == '~';
}

/// `http://` (or, with `https_too`, `https://`) and a host, at most
/// `max_report_url_bytes` of characters `ok` accepts.
template<class Accept>
bool valid_report_url(std::string_view url, bool https_too,
                      Accept ok) noexcept {
  std::string_view rest;
  if (url.substr(0, 7) == "http://")
    rest = url.substr(7);
  else if (https_too && url.substr(0, 8) == "https://")
    rest = url.substr(8);
  else
    return false;
  return !rest.empty() && rest.front() != '/' &&
         url.size() <= max_report_url_bytes &&
         std::all_of(url.begin(), url.end(), ok);
}

trigger_report read_report(const reader& r, const json::value& v) {
  const auto& obj = r.object(v, "/report");
  r.check_keys(obj, "/report", {"command", "url", "on"});
  trigger_report out;
  if (const auto* x = obj.if_contains("command")) {
    out.command = string_list(r, *x, "/report/command");
    if (out.command.empty() || out.command.size() > max_report_arguments)
      r.fail("/report/command",
             "expected the command and its arguments: 1 to " +
               std::to_string(max_report_arguments) + " strings");
    for (std::size_t i = 0; i < out.command.size(); ++i) {
      auto path = child("/report/command", i);
      auto names = placeholders_in(out.command[i]);
      if (!names)
        r.fail(path, "a placeholder is not closed: " +
                       quote(std::string_view{out.command[i]}.substr(
                         out.command[i].rfind("{{"), 40)));
      if (i == 0 && !names->empty())
        r.fail(path, "the command itself takes no placeholder");
      for (auto name : *names)
        if (!contains(report_placeholders, name))
          r.fail(path, "unknown placeholder " + quote(name) +
                         " for a report (known: " +
                         detail::join_quoted(report_placeholders) +
                         "; a title or body never goes into a command: the "
                         "report on its stdin has them)");
    }
  }
  if (const auto* x = obj.if_contains("url")) {
    out.url = r.nonempty_string(*x, "/report/url");
    if (!valid_report_url(out.url, false, config_url_char))
      r.fail("/report/url",
             "expected http://HOST[:PORT][/PATH] of at most " +
               std::to_string(max_report_url_bytes) +
               " printable characters, no placeholders (https is not "
               "supported: POST through a local relay), got " +
               quote(std::string_view{out.url}.substr(0, 80)));
  }
  if (out.command.empty() && out.url.empty())
    r.fail("/report", "expected \"command\" and/or \"url\": where the "
                      "result goes");
  if (const auto* x = obj.if_contains("on")) {
    out.on = string_list(r, *x, "/report/on");
    if (out.on.empty())
      r.fail("/report/on", "names no outcome: leave \"on\" out to report "
                           "every outcome");
    std::vector<std::string_view> names;
    for (auto o : all_task_outcomes)
      names.push_back(to_string(o));
    for (std::size_t i = 0; i < out.on.size(); ++i)
      if (!contains(names, out.on[i]))
        r.fail(child("/report/on", i), "expected one of " +
                                         detail::join_quoted(names) + ", got " +
                                         quote(out.on[i]));
  } else {
    for (auto o : all_task_outcomes)
      out.on.emplace_back(to_string(o));
  }
  return out;
}

/// Each `{{...}}` of each string value below `v` must be a placeholder
/// `allowed` accepts; `path` is `v`'s pointer.
template<class Allowed>
void check_placeholders(const reader& r, const json::value& v,
                        const std::string& path, const Allowed& allowed) {
  if (v.is_object()) {
    for (const auto& kv : v.get_object())
      check_placeholders(r, kv.value(), child(path, kv.key()), allowed);
  } else if (v.is_array()) {
    const auto& arr = v.get_array();
    for (std::size_t i = 0; i < arr.size(); ++i)
      check_placeholders(r, arr[i], child(path, i), allowed);
  } else if (v.is_string()) {
    std::string_view text{v.get_string().data(), v.get_string().size()};
    auto names = placeholders_in(text);
    if (!names)
      r.fail(path, "a placeholder is not closed: " +
                     quote(text.substr(text.rfind("{{"), 40)));
    for (auto name : *names) {
      if (!contains(trigger_placeholders, name))
        r.fail(path, "unknown placeholder " + quote(name) + " (known: " +
                       detail::join_quoted(trigger_placeholders) + ")");
      if (!allowed(name))
        r.fail(path, "{{" + std::string{name} +
                       "}} needs a comment: only an \"issue_comment\" "
                       "trigger has one");
    }
  }
}

trigger_spec read_trigger(const reader& r, const json::value& doc,
                          std::string name, const std::string& config_dir) {
  const auto& obj = r.object(doc, "");
  r.check_keys(obj, "",
               {"source", "secret_file", "on", "allow", "repos", "task",
                "stop_on_close", "report"});
  if (!detail::valid_identifier(name))
    r.fail("", "invalid trigger name " + quote(name) +
                 " (the file name must be 1 to 64 characters from "
                 "[A-Za-z0-9_.-] plus \".json\")");
  trigger_spec out;
  out.name = std::move(name);
  std::vector<std::string_view> source_names;
  for (auto x : trigger_sources)
    source_names.push_back(to_string(x));
  auto source = detail::enum_value<trigger_source>(
    r, r.required(obj, "", "source"), "/source", parse_trigger_source,
    source_names);
  bool github = source == trigger_source::github;

  auto file =
    r.nonempty_string(r.required(obj, "", "secret_file"), "/secret_file");
  if (file.find('\0') != std::string::npos)
    r.fail("/secret_file", "expected a path without NUL bytes");
  fs::path secret_path{file};
  if (secret_path.is_relative())
    secret_path = fs::path{config_dir} / secret_path;
  std::error_code ec;
  auto absolute = fs::absolute(secret_path, ec);
  out.secret_file = (ec ? secret_path : absolute).lexically_normal().string();
  out.secret = read_secret(r, out.secret_file);

  const auto& on = r.object(r.required(obj, "", "on"), "/on");
  if (github)
    out.on = read_github_on(r, on);
  else
    out.on = read_generic_on(r, on);

  if (const auto* v = obj.if_contains("allow")) {
    if (!github)
      r.fail("/allow", "only a GitHub trigger has \"allow\": a generic "
                       "delivery is trusted for its signature alone");
    out.allow = read_allow(r, *v);
  } else if (github) {
    r.fail("", "missing \"allow\": a GitHub trigger must say whose events "
               "may start a task (\"author_association\" and/or \"users\"), "
               "so that a stranger's comment never starts an agent");
  }
  if (const auto* v = obj.if_contains("repos")) {
    if (!github)
      r.fail("/repos", "only a GitHub trigger has \"repos\" (a generic "
                       "delivery names no repository)");
    out.repos = read_repos(r, *v);
  }
  if (const auto* v = obj.if_contains("stop_on_close")) {
    if (!github)
      r.fail("/stop_on_close", "only a GitHub trigger has \"stop_on_close\" "
                               "(a generic delivery closes nothing)");
    out.stop_on_close = r.boolean(*v, "/stop_on_close");
  }
  if (!github)
    out.stop_on_close = false;
  if (const auto* m = std::get_if<github_match>(&out.on);
      m != nullptr && out.stop_on_close && m->action == "closed")
    r.fail("/stop_on_close", "a trigger on \"closed\" would stop the task it "
                             "starts: set \"stop_on_close\" to false");

  if (const auto* v = obj.if_contains("report"))
    out.report = read_report(r, *v);

  const auto& task = r.required(obj, "", "task");
  out.task = r.object(task, "/task");
  if (out.task.contains("id"))
    r.fail("/task/id", "a trigger's task has no \"id\": each delivery names "
                       "its task (docs/BEHAVIOUR.md, Triggers: matching)");
  const auto* m = std::get_if<github_match>(&out.on);
  bool has_comment = m == nullptr || m->event == "issue_comment";
  check_placeholders(r, task, "/task", [&](std::string_view placeholder) {
    return has_comment || placeholder != "comment.body";
  });
  return out;
}

// -- reading a payload --------------------------------------------------------

/// Unwinds from a payload accessor to `decide`, which ignores the delivery
/// for `reason`. Never leaves this file.
struct ignored {
  std::string reason;
};

[[noreturn]] void ignore(std::string reason) {
  throw ignored{std::move(reason)};
}

/// The value at `pointer` in `payload`, or nullptr.
const json::value* find(const json::value& payload, std::string_view pointer) {
  boost::system::error_code ec;
  const auto* v = payload.find_pointer(pointer, ec);
  return ec ? nullptr : v;
}

/// The string at `pointer`; ignored when missing, not a string, or longer
/// than `max`.
std::string_view text(const json::value& payload, std::string_view pointer,
                      std::size_t max) {
  const auto* v = find(payload, pointer);
  if (v == nullptr || !v->is_string())
    ignore("the payload has no string at " + std::string{pointer});
  std::string_view str{v->get_string().data(), v->get_string().size()};
  if (str.size() > max)
    ignore("the payload's " + std::string{pointer} + " is longer than " +
           std::to_string(max) + " bytes");
  return str;
}

/// The positive integer at `pointer`; ignored otherwise.
std::uint64_t number(const json::value& payload, std::string_view pointer) {
  const auto* v = find(payload, pointer);
  if (v != nullptr && v->is_int64() && v->get_int64() > 0)
    return static_cast<std::uint64_t>(v->get_int64());
  if (v != nullptr && v->is_uint64() && v->get_uint64() > 0)
    return v->get_uint64();
  ignore("the payload has no positive integer at " + std::string{pointer});
}

/// The repository's full name, checked.
std::string_view full_name_of(const json::value& payload) {
  auto name = text(payload, "/repository/full_name", max_full_name_bytes);
  if (!valid_full_name(name))
    ignore("the payload's /repository/full_name " + quote(name) +
           " is not \"owner/name\"");
  return name;
}

/// `str` with each NUL byte, which a task refuses, replaced.
std::string without_nul(std::string_view str) {
  std::string out;
  out.reserve(str.size());
  for (auto c : str) {
    if (c == '\0')
      out += replacement_character;
    else
      out += c;
  }
  return out;
}

/// Text for a task: at most `max` bytes, cut at a character boundary and
/// followed by `separator` and a note saying so; NUL bytes replaced.
std::string bounded(std::string_view str, std::size_t max,
                    std::string_view what, std::string_view separator) {
  auto keep = std::min(str.size(), max);
  while (keep > 0 && keep < str.size() &&
         (static_cast<unsigned char>(str[keep]) & 0xC0) == 0x80)
    --keep;
  auto out = without_nul(str.substr(0, keep));
  if (keep < str.size()) {
    out += separator;
    out += "[tasksup: " + std::string{what} + " cut to " +
           std::to_string(keep) + " of " + std::to_string(str.size()) +
           " bytes]";
  }
  return out;
}

/// The body at `pointer`: GitHub sends null for an empty one.
std::string body(const json::value& payload, const std::string& pointer,
                 std::string_view what) {
  const auto* v = find(payload, pointer);
  if (v != nullptr && v->is_null())
    return {};
  if (v == nullptr || !v->is_string())
    ignore("the payload has no string at " + pointer);
  return bounded({v->get_string().data(), v->get_string().size()},
                 max_trigger_body_bytes, what, "\n\n");
}

void used_placeholders(const json::value& v,
                       std::vector<std::string_view>& out);

/// The placeholders the strings below `obj` use.
void used_placeholders(const json::object& obj,
                       std::vector<std::string_view>& out) {
  for (const auto& kv : obj)
    used_placeholders(kv.value(), out);
}

void used_placeholders(const json::value& v,
                       std::vector<std::string_view>& out) {
  if (v.is_object()) {
    used_placeholders(v.get_object(), out);
  } else if (v.is_array()) {
    for (const auto& x : v.get_array())
      used_placeholders(x, out);
  } else if (v.is_string()) {
    std::string_view str{v.get_string().data(), v.get_string().size()};
    for (auto name : trigger_placeholders)
      if (!contains(out, name) &&
          str.find("{{" + std::string{name} + "}}") != std::string_view::npos)
        out.push_back(name);
  }
}

using value_list = std::vector<std::pair<std::string_view, std::string>>;

/// The value of each placeholder the task uses, read from the payload;
/// the issue or pull request is at `subject`.
value_list placeholder_values(const trigger_spec& trigger,
                              const json::value& payload,
                              const std::string& subject,
                              std::string_view delivery_id) {
  std::vector<std::string_view> used;
  used_placeholders(trigger.task, used);
  value_list out;
  for (auto name : used) {
    std::string value;
    if (name == "issue.title")
      value = bounded(text(payload, subject + "/title", SIZE_MAX),
                      max_trigger_title_bytes, "title", " ");
    else if (name == "issue.body")
      value = body(payload, subject + "/body", "body");
    else if (name == "issue.number")
      value = std::to_string(number(payload, subject + "/number"));
    else if (name == "issue.url")
      value = without_nul(text(payload, subject + "/html_url", max_url_bytes));
    else if (name == "repository.full_name")
      value = std::string{full_name_of(payload)};
    else if (name == "comment.body")
      value = body(payload, "/comment/body", "comment");
    else if (name == "sender.login")
      value = without_nul(text(payload, "/sender/login", max_login_bytes));
    else if (name == "delivery")
      value = std::string{delivery_id};
    out.emplace_back(name, std::move(value));
  }
  return out;
}

/// `values` as `render_template` takes them.
std::vector<std::pair<std::string_view, std::string_view>>
views_of(const value_list& values) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  out.reserve(values.size());
  for (const auto& [name, value] : values)
    out.emplace_back(name, value);
  return out;
}

/// `v` with each placeholder of its string values replaced, in one pass:
/// a replacement is never scanned again, and keys are left as they are.
void fill(
  json::value& v,
  const std::vector<std::pair<std::string_view, std::string_view>>& views) {
  if (v.is_object()) {
    for (auto& kv : v.get_object())
      fill(kv.value(), views);
  } else if (v.is_array()) {
    for (auto& x : v.get_array())
      fill(x, views);
  } else if (v.is_string()) {
    auto& str = v.get_string();
    if (std::string_view{str.data(), str.size()}.find("{{") !=
        std::string_view::npos)
      str = render_template({str.data(), str.size()}, views);
  }
}

/// The trigger's task, its placeholders filled in, its id and repository
/// set.
json::object make_task(const trigger_spec& trigger, const value_list& values,
                       const std::string& task_id, std::string_view full_name) {
  json::value task(trigger.task);
  fill(task, views_of(values));
  auto& obj = task.get_object();
  obj["id"] = task_id;
  if (!obj.contains("repo"))
    if (auto it = trigger.repos.find(std::string{full_name});
        it != trigger.repos.end())
      obj["repo"] = it->second;
  return std::move(obj);
}

/// The value of report placeholder `name` (not `task.outcome`), read from
/// the payload and checked to be safe as a command's argument; the issue or
/// pull request is at `subject`.
std::string report_value(std::string_view name, const json::value& payload,
                         const std::string& subject,
                         std::string_view delivery_id,
                         const std::string& task_id) {
  std::string value;
  if (name == "issue.number") {
    value = std::to_string(number(payload, subject + "/number"));
  } else if (name == "issue.url") {
    auto url = text(payload, subject + "/html_url", max_url_bytes);
    if (!valid_report_url(url, true, payload_url_char))
      ignore("the payload's " + subject + "/html_url " +
             quote(url.substr(0, 80)) +
             " is not an http(s) URL a report command can be given");
    value = std::string{url};
  } else if (name == "repository.full_name") {
    value = std::string{full_name_of(payload)};
  } else if (name == "sender.login") {
    auto login = text(payload, "/sender/login", max_login_bytes);
    // An app acts as "name[bot]".
    auto bare = login.size() > 5 && login.substr(login.size() - 5) == "[bot]"
                  ? login.substr(0, login.size() - 5)
                  : login;
    if (!valid_login(bare))
      ignore("the payload's /sender/login " + quote(login) +
             " is not a GitHub login a report command can be given");
    value = std::string{login};
  } else if (name == "delivery") {
    value = std::string{delivery_id};
  } else if (name == "task.id") {
    value = task_id;
  }
  // Never an option, whatever the payload says.
  if (!value.empty() && value.front() == '-')
    ignore("the report's {{" + std::string{name} + "}} would begin with " +
           quote(std::string_view{value}.substr(0, 40)));
  return value;
}

/// The trigger's report for task `task_id`, its command's placeholders
/// filled in (`{{task.outcome}}` stays for the reporter).
trigger_report make_report(const trigger_spec& trigger,
                           const json::value& payload,
                           const std::string& subject,
                           std::string_view delivery_id,
                           const std::string& task_id) {
  auto out = *trigger.report;
  for (auto& arg : out.command) {
    auto names = placeholders_in(arg);
    if (!names || names->empty())
      continue;
    // `{{task.outcome}}`, given no value, stays as written.
    value_list values;
    for (auto name : *names)
      if (name != "task.outcome")
        values.emplace_back(
          name, report_value(name, payload, subject, delivery_id, task_id));
    arg = render_template(arg, views_of(values));
  }
  return out;
}

/// What a report says of the delivery: what the payload has of it, each
/// value as `report_value` checks it (a value missing or unsafe is left
/// out).
json::object report_context(const trigger_spec& trigger,
                            std::string_view event_name,
                            const json::value& payload,
                            const std::string& subject,
                            std::string_view delivery_id) {
  json::object out{{"trigger", trigger.name},
                   {"delivery", delivery_id},
                   {"event", event_name}};
  auto add = [&](std::string_view key, std::string_view placeholder) {
    try {
      out[key] = report_value(placeholder, payload, subject, delivery_id, {});
    } catch (ignored&) {
      // Not in this payload: the report says nothing of it.
    }
  };
  add("repository", "repository.full_name");
  add("issue_url", "issue.url");
  add("sender", "sender.login");
  try {
    out["issue_number"] = number(payload, subject + "/number");
  } catch (ignored&) {
    // nop
  }
  return out;
}

/// A start of `task_id`: the trigger's task, its report and the context.
trigger_decision
start_decision(const trigger_spec& trigger, std::string_view event_name,
               const json::value& payload, const std::string& subject,
               std::string_view delivery_id, const std::string& task_id,
               std::string_view full_name);

trigger_decision decision(trigger_action action, std::string task_id = {},
                          std::string reason = {}) {
  trigger_decision out;
  out.action = action;
  out.task_id = std::move(task_id);
  out.reason = std::move(reason);
  return out;
}

/// `gh-<owner>-<repo>-<number>`.
std::string github_task_id(std::string_view full_name, std::uint64_t number) {
  auto owner = full_name.substr(0, full_name.find('/'));
  auto repo = full_name.substr(full_name.find('/') + 1);
  return trigger_task_id("gh-" + std::string{owner} + "-" + std::string{repo} +
                         "-" + std::to_string(number));
}

/// Whether `body` holds `mention` ("@name") as a word: no letter, digit,
/// `_`, `-`, `.` or `@` before it (so not in "me@name.org"), no letter,
/// digit, `_` or `-` after it.
bool mentions(std::string_view body, std::string_view mention) {
  if (mention.empty() || body.size() < mention.size())
    return false;
  for (std::size_t at = 0; at + mention.size() <= body.size(); ++at) {
    if (!equal_ignoring_case(body.substr(at, mention.size()), mention))
      continue;
    char before = at == 0 ? ' ' : body[at - 1];
    auto end = at + mention.size();
    char after = end == body.size() ? ' ' : body[end];
    if (!(is_id_char(before) || before == '@') &&
        !(is_alnum(after) || after == '_' || after == '-'))
      return true;
  }
  return false;
}

/// Whether the issue or pull request at `subject` carries `label`.
bool has_label(const json::value& payload, const std::string& subject,
               std::string_view label) {
  const auto* labels = find(payload, subject + "/labels");
  if (labels == nullptr || !labels->is_array())
    ignore("the payload has no array at " + subject + "/labels");
  for (const auto& x : labels->get_array()) {
    if (!x.is_object())
      continue;
    const auto* name = x.get_object().if_contains("name");
    if (name != nullptr && name->is_string() &&
        equal_ignoring_case(
          {name->get_string().data(), name->get_string().size()}, label))
      return true;
  }
  return false;
}

trigger_decision decide_github(const trigger_spec& trigger,
                               const github_match& on,
                               std::string_view event_name,
                               std::string_view delivery_id,
                               const json::value& payload) {
  if (!payload.is_object())
    ignore("the payload is not a JSON object");
  std::string subject =
    event_name == "pull_request" ? "/pull_request" : "/issue";
  // Every event of `github_trigger_events` has an action; whether it must
  // be there is up to the check that reads it.
  const auto* action_value = find(payload, "/action");
  auto action = [&] { return text(payload, "/action", max_login_bytes); };
  // A closed issue stops its task, whatever event started it.
  if (trigger.stop_on_close &&
      (event_name == "issues" || event_name == "pull_request") &&
      action_value != nullptr && action_value->is_string() &&
      action_value->get_string() == "closed") {
    auto full_name = full_name_of(payload);
    return decision(
      trigger_action::stop,
      github_task_id(full_name, number(payload, subject + "/number")));
  }
  if (event_name != on.event)
    return decision(trigger_action::ignore, {},
                    "event " + quote(event_name) + ", the trigger is on " +
                      quote(on.event));
  if (!on.action.empty() && action() != on.action)
    return decision(trigger_action::ignore, {},
                    "action " + quote(action()) + ", the trigger is on " +
                      quote(on.action));
  if (!on.label.empty()) {
    if (action() == "labeled") {
      auto added = text(payload, "/label/name", max_url_bytes);
      if (!equal_ignoring_case(added, on.label))
        return decision(trigger_action::ignore, {},
                        "label " + quote(added) + " added, the trigger is on " +
                          quote(on.label));
    } else if (!has_label(payload, subject, on.label)) {
      return decision(trigger_action::ignore, {},
                      "the " + subject.substr(1) + " has no label " +
                        quote(on.label));
    }
  }
  auto sender = text(payload, "/sender/login", max_login_bytes);
  if (!on.mention.empty()) {
    auto comment = text(payload, "/comment/body", SIZE_MAX);
    if (!mentions(comment, on.mention))
      return decision(trigger_action::ignore, {},
                      "the comment does not mention " + quote(on.mention));
    // The account the trigger answers to quoting its own name must not
    // start it again.
    if (equal_ignoring_case(sender, on.mention.substr(1)))
      return decision(trigger_action::ignore, {},
                      "the comment is by " + quote(on.mention) + " itself");
  }
  auto author =
    event_name == "issue_comment" ? std::string{"/comment"} : subject;
  auto association =
    text(payload, author + "/author_association", max_login_bytes);
  const auto& allow = trigger.allow;
  bool allowed = contains(allow.author_associations, association) ||
                 std::any_of(allow.users.begin(), allow.users.end(),
                             [&](const std::string& u) {
                               return equal_ignoring_case(u, sender);
                             });
  if (!allowed)
    return decision(trigger_action::refuse, {},
                    "the author's association " + quote(association) +
                      " and the sender " + quote(sender) +
                      " are not allowed by the trigger");
  auto full_name = full_name_of(payload);
  auto task_id =
    github_task_id(full_name, number(payload, subject + "/number"));
  return start_decision(trigger, event_name, payload, subject, delivery_id,
                        task_id, full_name);
}

trigger_decision decide_generic(const trigger_spec& trigger,
                                const generic_match& on,
                                std::string_view delivery_id,
                                const json::value& payload) {
  for (const auto& [pointer, expected] : on.fields) {
    const auto* v = find(payload, pointer);
    if (v == nullptr || !v->is_string())
      return decision(trigger_action::ignore, {},
                      "the payload has no string at " + quote(pointer));
    std::string_view got{v->get_string().data(), v->get_string().size()};
    if (got != expected)
      return decision(trigger_action::ignore, {},
                      quote(pointer) + " is " + quote(got) +
                        ", the trigger wants " + quote(expected));
  }
  auto task_id = trigger_task_id(trigger.name + "-" + std::string{delivery_id});
  return start_decision(trigger, "generic", payload, "/issue", delivery_id,
                        task_id, {});
}

trigger_decision
start_decision(const trigger_spec& trigger, std::string_view event_name,
               const json::value& payload, const std::string& subject,
               std::string_view delivery_id, const std::string& task_id,
               std::string_view full_name) {
  auto values = placeholder_values(trigger, payload, subject, delivery_id);
  auto out = decision(trigger_action::start, task_id);
  out.task = make_task(trigger, values, task_id, full_name);
  if (trigger.report)
    out.report = make_report(trigger, payload, subject, delivery_id, task_id);
  out.context =
    report_context(trigger, event_name, payload, subject, delivery_id);
  return out;
}

} // namespace

std::string_view to_string(trigger_source x) noexcept {
  switch (x) {
    case trigger_source::github:
      return "github";
    case trigger_source::generic:
      return "generic";
  }
  return "github";
}

std::optional<trigger_source>
parse_trigger_source(std::string_view str) noexcept {
  for (auto x : trigger_sources)
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

trigger_source trigger_spec::source() const noexcept {
  return std::holds_alternative<github_match>(on) ? trigger_source::github
                                                  : trigger_source::generic;
}

expected<trigger_spec> parse_trigger(const boost::json::value& doc,
                                     std::string_view where, std::string name,
                                     const std::string& config_dir) {
  return detail::guarded([&] {
    return read_trigger(reader{where}, doc, std::move(name), config_dir);
  });
}

boost::json::object detail::sample_trigger_task(const trigger_spec& trigger) {
  std::vector<std::string_view> used;
  used_placeholders(trigger.task, used);
  value_list values;
  for (auto name : used)
    values.emplace_back(name, name == "issue.number" ? "1" : "sample");
  auto full_name =
    trigger.repos.empty() ? std::string{} : trigger.repos.begin()->first;
  return make_task(trigger, values, "trigger-check", full_name);
}

expected<trigger_spec> load_trigger_file(const std::string& path,
                                         const std::string& config_dir) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  return parse_trigger(*doc, path, fs::path{path}.stem().string(), config_dir);
}

expected<trigger_map> load_triggers_dir(const std::string& dir,
                                        const std::string& config_dir) {
  trigger_map out;
  auto files = detail::json_files_in(dir);
  if (!files)
    return files.error();
  for (const auto& file : *files) {
    auto trigger = load_trigger_file(file.string(), config_dir);
    if (!trigger)
      return trigger.error();
    out.emplace(trigger->name, std::move(*trigger));
  }
  return out;
}

std::string_view to_string(trigger_action x) noexcept {
  switch (x) {
    case trigger_action::start:
      return "start";
    case trigger_action::stop:
      return "stop";
    case trigger_action::ignore:
      return "ignore";
    case trigger_action::refuse:
      return "refuse";
  }
  return "ignore";
}

bool valid_delivery_id(std::string_view id) noexcept {
  return !id.empty() && id.size() <= max_delivery_id_bytes &&
         std::all_of(id.begin(), id.end(), is_id_char);
}

std::string trigger_task_id(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    if (!is_id_char(c))
      c = '-';
  if (out.size() > detail::max_id_length) {
    // FNV-1a: fixed, so a delivery maps to the same id on every node.
    std::uint32_t hash = 2166136261u;
    for (unsigned char c : text)
      hash = (hash ^ c) * 16777619u;
    static constexpr char hex[] = "0123456789abcdef";
    out.resize(detail::max_id_length - 9);
    out += '-';
    for (int shift = 28; shift >= 0; shift -= 4)
      out += hex[(hash >> shift) & 0xf];
  }
  if (out.empty() || out == "." || out == "..")
    out = "trigger";
  return out;
}

trigger_decision decide(const trigger_spec& trigger,
                        std::string_view event_name,
                        std::string_view delivery_id,
                        const boost::json::value& payload) {
  if (!valid_delivery_id(delivery_id))
    return decision(trigger_action::ignore, {},
                    "the delivery id " + quote(delivery_id) + " is not 1 to " +
                      std::to_string(max_delivery_id_bytes) +
                      " characters from [A-Za-z0-9_.-]");
  try {
    if (const auto* on = std::get_if<github_match>(&trigger.on))
      return decide_github(trigger, *on, event_name, delivery_id, payload);
    return decide_generic(trigger, std::get<generic_match>(trigger.on),
                          delivery_id, payload);
  } catch (ignored& x) {
    return decision(trigger_action::ignore, {}, std::move(x.reason));
  }
}

} // namespace tasksup
