// Webhook triggers (libsupervisor/core/src/trigger.cpp): trigger files and
// their refusals, and what realistic GitHub and generic deliveries decide. The
// payloads are cut down from GitHub's webhook documentation, keeping the
// fields' names and types.

#include "tasksup/supervisor/trigger.hpp"

#include "tasksup/supervisor/config.hpp"

#include "../temp_dir.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace tasksup;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr auto secret = "It's a Secret to Everybody";

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream out{file, std::ios::binary};
  out << text;
}

/// The issue-labeled trigger of the issue, with a secret file beside it.
constexpr auto labeled_trigger = R"({
  "source": "github", "secret_file": "github.secret",
  "on": {"event": "issues", "action": "labeled", "label": "agent"},
  "allow": {"author_association": ["OWNER", "MEMBER", "COLLABORATOR"]},
  "repos": {"octo-org/webapp": "/srv/src/webapp"},
  "task": {"prompt": "Fix #{{issue.number}} of {{repository.full_name}}: {{issue.title}}\n\n{{issue.body}}",
           "env": {"ISSUE_URL": "{{issue.url}}", "DELIVERY": "{{delivery}}"}}})";

/// A trigger on comments that mention the bot.
constexpr auto mention_trigger = R"({
  "source": "github", "secret_file": "github.secret",
  "on": {"event": "issue_comment", "action": "created",
         "mention": "@tasksup-bot"},
  "allow": {"author_association": ["OWNER", "MEMBER", "COLLABORATOR"],
            "users": ["trusted-friend"]},
  "task": {"prompt": "{{sender.login}} asks on {{issue.url}}: {{comment.body}}",
           "repo": {"path": "/srv/src/other", "base": "main"}}})";

/// GitHub's `issues` event, action `labeled`, from a member.
constexpr auto labeled_payload = R"({
  "action": "labeled",
  "issue": {
    "url": "https://api.github.com/repos/octo-org/webapp/issues/42",
    "html_url": "https://github.com/octo-org/webapp/issues/42",
    "id": 1001, "number": 42, "title": "Login button misaligned",
    "user": {"login": "alice", "id": 1, "type": "User"},
    "labels": [{"id": 1, "name": "bug", "color": "d73a4a"},
               {"id": 2, "name": "agent", "color": "0e8a16"}],
    "state": "open", "locked": false, "comments": 0,
    "author_association": "MEMBER",
    "body": "The button is 3px off on mobile."},
  "label": {"id": 2, "name": "agent", "color": "0e8a16"},
  "repository": {"id": 7, "name": "webapp", "full_name": "octo-org/webapp",
                 "private": false, "owner": {"login": "octo-org", "id": 9}},
  "sender": {"login": "alice", "id": 1, "type": "User"}})";

/// GitHub's `issue_comment` event, action `created`: a collaborator asks
/// the bot on a stranger's issue.
constexpr auto comment_payload = R"({
  "action": "created",
  "issue": {
    "html_url": "https://github.com/octo-org/webapp/issues/7",
    "number": 7, "title": "Crash on start", "labels": [],
    "state": "open", "author_association": "NONE", "body": null,
    "user": {"login": "stranger", "id": 5}},
  "comment": {
    "id": 11, "html_url": "https://github.com/octo-org/webapp/issues/7#issuecomment-11",
    "user": {"login": "bob", "id": 2},
    "body": "Thanks for the report. @tasksup-bot, please have a look.",
    "author_association": "COLLABORATOR"},
  "repository": {"id": 7, "name": "webapp", "full_name": "octo-org/webapp"},
  "sender": {"login": "bob", "id": 2}})";

const std::string delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

json::value payload(const char* text) {
  return json::parse(text);
}

json::object& at(json::value& v, std::initializer_list<const char*> keys) {
  auto* obj = &v.as_object();
  for (auto key : keys)
    obj = &(*obj)[key].as_object();
  return *obj;
}

/// A config directory with `github.secret` in it.
struct config_dir {
  test::temp_dir dir{"trigger"};

  config_dir() { write(fs::path{dir.path} / "github.secret", secret); }

  expected<trigger_spec> parse(const std::string& text) const {
    auto doc = parse_json_text(text, "agent.json");
    REQUIRE(doc);
    return parse_trigger(*doc, "agent.json", "agent", dir.path);
  }

  trigger_spec trigger(const std::string& text) const {
    auto t = parse(text);
    INFO((t ? "" : t.error().to_string()));
    REQUIRE(t);
    return std::move(*t);
  }

  /// The whole message of a trigger that must not parse.
  std::string refusal(const std::string& text) const {
    auto t = parse(text);
    INFO(text);
    REQUIRE_FALSE(t);
    CHECK(t.error().where == "agent.json");
    CHECK(t.error().to_string().find(secret) == std::string::npos);
    return t.error().to_string();
  }
};

/// `labeled_trigger` with `key` set to `value` (JSON), or removed when
/// `value` is empty.
std::string with(const char* key, const std::string& value,
                 const char* base = labeled_trigger) {
  auto doc = json::parse(base);
  if (value.empty())
    doc.as_object().erase(key);
  else
    doc.as_object()[key] = json::parse(value);
  return json::serialize(doc);
}

trigger_decision decide(const trigger_spec& t, std::string_view event,
                        const json::value& p) {
  return tasksup::decide(t, event, delivery, p);
}

std::string prompt_of(const trigger_decision& d) {
  REQUIRE(d.task.contains("prompt"));
  return json::value_to<std::string>(d.task.at("prompt"));
}

} // namespace

// -- trigger files ------------------------------------------------------------

TEST_CASE("trigger file: every key read", "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(labeled_trigger);
  CHECK(t.name == "agent");
  CHECK(t.source() == trigger_source::github);
  const auto& on = std::get<github_match>(t.on);
  CHECK(on.event == "issues");
  CHECK(on.action == "labeled");
  CHECK(on.label == "agent");
  CHECK(on.mention.empty());
  CHECK(t.secret == secret);
  CHECK(t.secret_file == (fs::path{cfg.dir.path} / "github.secret").string());
  CHECK(t.allow.author_associations ==
        std::vector<std::string>{"OWNER", "MEMBER", "COLLABORATOR"});
  CHECK(t.allow.users.empty());
  CHECK(t.repos == std::map<std::string, std::string>{
                     {"octo-org/webapp", "/srv/src/webapp"}});
  CHECK(t.stop_on_close);
  // The task is kept as written.
  CHECK(t.task.at("env").at("DELIVERY") == "{{delivery}}");

  auto m = cfg.trigger(mention_trigger);
  CHECK(std::get<github_match>(m.on).mention == "@tasksup-bot");
  CHECK(m.allow.users == std::vector<std::string>{"trusted-friend"});
  CHECK(cfg.trigger(with("stop_on_close", "false")).stop_on_close == false);
}

TEST_CASE("trigger file: the secret file", "[trigger]") {
  config_dir cfg;
  // One trailing newline (or CRLF) is not part of the secret.
  write(fs::path{cfg.dir.path} / "nl.secret", "abc\n");
  CHECK(cfg.trigger(with("secret_file", "\"nl.secret\"")).secret == "abc");
  write(fs::path{cfg.dir.path} / "crlf.secret", "abc\r\n");
  CHECK(cfg.trigger(with("secret_file", "\"crlf.secret\"")).secret == "abc");
  // Absolute paths are read as they are.
  auto elsewhere = test::temp_dir{"trigger-secret"};
  auto abs = (fs::path{elsewhere.path} / "s").string();
  write(abs, "xyz");
  auto t = cfg.trigger(with("secret_file", "\"" + abs + "\""));
  CHECK(t.secret == "xyz");
  CHECK(t.secret_file == abs);

  auto missing = cfg.refusal(with("secret_file", "\"none.secret\""));
  CHECK(missing.rfind("agent.json: /secret_file: cannot open the secret file "
                      "\"" +
                        cfg.dir.path + "/none.secret\": ",
                      0) == 0);
  write(fs::path{cfg.dir.path} / "empty.secret", "\n");
  CHECK(cfg.refusal(with("secret_file", "\"empty.secret\"")) ==
        "agent.json: /secret_file: the secret file \"" + cfg.dir.path +
          "/empty.secret\" is empty");
  fs::create_directory(fs::path{cfg.dir.path} / "secrets.d");
  CHECK(cfg.refusal(with("secret_file", "\"secrets.d\"")) ==
        "agent.json: /secret_file: the secret file \"" + cfg.dir.path +
          "/secrets.d\" is not a regular file");
  write(fs::path{cfg.dir.path} / "big.secret", std::string(5000, 'k'));
  CHECK(cfg.refusal(with("secret_file", "\"big.secret\"")) ==
        "agent.json: /secret_file: the secret file \"" + cfg.dir.path +
          "/big.secret\" is larger than 4096 bytes");
  CHECK(cfg.refusal(with("secret_file", "")) ==
        "agent.json: missing required key \"secret_file\"");
  CHECK(cfg.refusal(with("secret_file", "\"\"")) ==
        "agent.json: /secret_file: expected a non-empty string");
}

TEST_CASE("trigger file: refusals name the file and the JSON pointer",
          "[trigger]") {
  config_dir cfg;
  CHECK(cfg.refusal(with("colour", "\"red\"")) ==
        "agent.json: /colour: unknown key \"colour\" (allowed: source, "
        "secret_file, on, allow, repos, task, stop_on_close, report)");
  CHECK(cfg.refusal(with("source", "")) ==
        "agent.json: missing required key \"source\"");
  CHECK(cfg.refusal(with("source", "\"gitlab\"")) ==
        "agent.json: /source: expected one of \"github\", \"generic\", got "
        "\"gitlab\"");
  CHECK(cfg.refusal(with("on", "")) ==
        "agent.json: missing required key \"on\"");
  CHECK(cfg.refusal(with("on", R"({"action": "opened"})")) ==
        "agent.json: /on: missing required key \"event\"");
  CHECK(cfg.refusal(with("on", R"({"event": "push"})")) ==
        "agent.json: /on/event: expected one of \"issues\", "
        "\"issue_comment\", \"pull_request\" (the events whose issue or pull "
        "request names the task), got \"push\"");
  CHECK(cfg.refusal(with("on", R"({"event": "issues", "labels": "x"})")) ==
        "agent.json: /on/labels: unknown key \"labels\" (allowed: event, "
        "action, label, mention)");
  CHECK(cfg.refusal(with("on", R"({"event": "issues", "action": ""})")) ==
        "agent.json: /on/action: expected a non-empty string");
  CHECK(cfg.refusal(
          with("on", R"({"event": "issues", "mention": "@tasksup-bot"})")) ==
        "agent.json: /on/mention: only an \"issue_comment\" trigger has a "
        "mention (it is looked for in the comment)");
  CHECK(cfg.refusal(with(
          "on", R"({"event": "issue_comment", "mention": "tasksup-bot"})")) ==
        "agent.json: /on/mention: expected \"@\" and a GitHub login "
        "(letters, digits and hyphens, at most 39), got \"tasksup-bot\"");
  CHECK(cfg.refusal(with("allow", "")) ==
        "agent.json: missing \"allow\": a GitHub trigger must say whose "
        "events may start a task (\"author_association\" and/or \"users\"), "
        "so that a stranger's comment never starts an agent");
  CHECK(cfg.refusal(with("allow", "{}")) ==
        "agent.json: /allow: admits no one: give \"author_association\" or "
        "\"users\"");
  CHECK(cfg.refusal(with("allow", R"({"author_association": []})")) ==
        "agent.json: /allow: admits no one: give \"author_association\" or "
        "\"users\"");
  CHECK(cfg.refusal(
          with("allow", R"({"author_association": ["OWNER", "ADMIN"]})")) ==
        "agent.json: /allow/author_association/1: expected one of \"OWNER\", "
        "\"MEMBER\", \"COLLABORATOR\", \"CONTRIBUTOR\", "
        "\"FIRST_TIME_CONTRIBUTOR\", \"FIRST_TIMER\", \"MANNEQUIN\", "
        "\"NONE\", got \"ADMIN\"");
  CHECK(cfg.refusal(with("allow", R"({"users": ["al ice"]})")) ==
        "agent.json: /allow/users/0: expected a GitHub login (letters, "
        "digits and hyphens, at most 39), got \"al ice\"");
  CHECK(cfg.refusal(with("allow", R"({"teams": ["core"]})")) ==
        "agent.json: /allow/teams: unknown key \"teams\" (allowed: "
        "author_association, users)");
  // A key with a slash is escaped in the pointer (RFC 6901).
  CHECK(cfg.refusal(with("repos", R"({"octo-org/webapp": "src/webapp"})")) ==
        "agent.json: /repos/octo-org~1webapp: expected the absolute path of "
        "a local clone, got \"src/webapp\"");
  CHECK(cfg.refusal(with("repos", R"({"webapp": "/srv/src/webapp"})")) ==
        "agent.json: /repos/webapp: expected a repository's full name "
        "(\"owner/name\") as the key, got \"webapp\"");
  CHECK(cfg.refusal(with("stop_on_close", "1")) ==
        "agent.json: /stop_on_close: expected true or false");
  CHECK(cfg.refusal(with("on", R"({"event": "issues", "action": "closed"})")) ==
        "agent.json: /stop_on_close: a trigger on \"closed\" would stop the "
        "task it starts: set \"stop_on_close\" to false");
  CHECK(cfg.refusal(with("task", "")) ==
        "agent.json: missing required key \"task\"");
  CHECK(cfg.refusal(with("task", "\"fix it\"")) ==
        "agent.json: /task: expected an object");
  CHECK(cfg.refusal(with("task", R"({"id": "fixed", "prompt": "p"})")) ==
        "agent.json: /task/id: a trigger's task has no \"id\": each delivery "
        "names its task (docs/BEHAVIOUR.md, Triggers: matching)");
  CHECK(cfg.refusal("[]") == "agent.json: expected an object");
  // The name comes from the file and becomes part of task ids.
  auto doc = parse_json_text(labeled_trigger, "x");
  REQUIRE(doc);
  auto bad_name = parse_trigger(*doc, "a b.json", "a b", cfg.dir.path);
  REQUIRE_FALSE(bad_name);
  CHECK(bad_name.error().what ==
        "invalid trigger name \"a b\" (the file name must be 1 to 64 "
        "characters from [A-Za-z0-9_.-] plus \".json\")");
}

TEST_CASE("trigger file: placeholders in the task are checked where they are",
          "[trigger]") {
  config_dir cfg;
  CHECK(cfg.refusal(with("task", R"({"prompt": "{{issue.titel}}"})")) ==
        "agent.json: /task/prompt: unknown placeholder \"issue.titel\" "
        "(known: \"issue.title\", \"issue.body\", \"issue.number\", "
        "\"issue.url\", \"repository.full_name\", \"comment.body\", "
        "\"sender.login\", \"delivery\")");
  CHECK(cfg.refusal(with("task", R"({"prompt": "p",
    "gates": [{"name": "t", "command": ["make", "{{issue.title"]}]})")) ==
        "agent.json: /task/gates/0/command/1: a placeholder is not closed: "
        "\"{{issue.title\"");
  CHECK(cfg.refusal(with("task", R"({"prompt": "p",
    "env": {"A/B": "{{ issue.title }}"}})")) ==
        "agent.json: /task/env/A~1B: unknown placeholder \" issue.title \" "
        "(known: \"issue.title\", \"issue.body\", \"issue.number\", "
        "\"issue.url\", \"repository.full_name\", \"comment.body\", "
        "\"sender.login\", \"delivery\")");
  // An `issues` event has no comment.
  CHECK(cfg.refusal(with("task", R"({"prompt": "{{comment.body}}"})")) ==
        "agent.json: /task/prompt: {{comment.body}} needs a comment: only an "
        "\"issue_comment\" trigger has one");
  CHECK(cfg.parse(mention_trigger));
  // Text without placeholders, and single braces, are left alone.
  CHECK(cfg.parse(with("task", R"({"prompt": "a {b} c }} d"})")));
}

TEST_CASE("trigger file: a generic trigger", "[trigger]") {
  config_dir cfg;
  auto generic = R"({"source": "generic", "secret_file": "github.secret",
    "on": {"/event": "deploy", "/target/env": "prod", "/a~1b": ""},
    "task": {"prompt": "deploy {{delivery}}: {{issue.title}}"}})";
  auto t = cfg.trigger(generic);
  CHECK(t.source() == trigger_source::generic);
  CHECK(std::get<generic_match>(t.on).fields ==
        std::vector<std::pair<std::string, std::string>>{
          {"/event", "deploy"}, {"/target/env", "prod"}, {"/a~1b", ""}});
  CHECK_FALSE(t.stop_on_close);
  CHECK(cfg.refusal(with("allow", R"({"users": ["alice"]})", generic)) ==
        "agent.json: /allow: only a GitHub trigger has \"allow\": a generic "
        "delivery is trusted for its signature alone");
  CHECK(cfg.refusal(with("repos", R"({"o/r": "/r"})", generic)) ==
        "agent.json: /repos: only a GitHub trigger has \"repos\" (a generic "
        "delivery names no repository)");
  CHECK(cfg.refusal(with("stop_on_close", "true", generic)) ==
        "agent.json: /stop_on_close: only a GitHub trigger has "
        "\"stop_on_close\" (a generic delivery closes nothing)");
  CHECK(cfg.refusal(with("on", R"({"event": "deploy"})", generic)) ==
        "agent.json: /on/event: expected a JSON pointer such as \"/action\" "
        "as the key, got \"event\"");
  CHECK(cfg.refusal(with("on", R"({"/a~2": "x"})", generic)) ==
        "agent.json: /on/~1a~02: expected a JSON pointer such as \"/action\" "
        "as the key, got \"/a~2\"");
  CHECK(cfg.refusal(with("on", R"({"/event": 1})", generic)) ==
        "agent.json: /on/~1event: expected a string");
}

TEST_CASE("trigger files: loaded with the config directory, by name",
          "[trigger]") {
  config_dir cfg;
  auto dir = fs::path{cfg.dir.path};
  auto trig = dir / "triggers";
  write(trig / "b-comments.json", mention_trigger);
  write(trig / "a-labels.json", labeled_trigger);
  write(trig / "notes.txt", "not a trigger");
  auto loaded = load_config_dir(cfg.dir.path);
  INFO((loaded ? "" : loaded.error().to_string()));
  REQUIRE(loaded);
  REQUIRE(loaded->triggers.size() == 2);
  CHECK(loaded->triggers.begin()->first == "a-labels");
  CHECK(loaded->triggers.at("a-labels").name == "a-labels");
  // secret_file is relative to the config directory, not to triggers/.
  CHECK(loaded->triggers.at("b-comments").secret == secret);

  CHECK(load_config_dir(TASKSUP_SOURCE_DIR "/config")->triggers.empty());

  write(trig / "c-bad.json", with("allow", ""));
  auto bad = load_config_dir(cfg.dir.path);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == (trig / "c-bad.json").string());
  CHECK(bad.error().path.empty());
  fs::remove(trig / "c-bad.json");
  write(trig / "c-bad.json", with("secret_file", "\"triggers/none\""));
  bad = load_config_dir(cfg.dir.path);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == (trig / "c-bad.json").string());
  CHECK(bad.error().path == "/secret_file");
  fs::remove(trig / "c-bad.json");
  // Its task is checked when it loads, as a delivery would make it: a
  // typo is found now, not at the first delivery.
  write(trig / "c-bad.json", with("task", R"({"promt": "{{issue.title}}"})"));
  bad = load_config_dir(cfg.dir.path);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == (trig / "c-bad.json").string());
  CHECK(bad.error().path == "/task/promt");
  fs::remove(trig / "c-bad.json");

  auto file =
    load_trigger_file((trig / "a-labels.json").string(), cfg.dir.path);
  REQUIRE(file);
  CHECK(file->name == "a-labels");
}

// -- deciding: GitHub ---------------------------------------------------------

TEST_CASE("trigger decide: an issue labeled by a member starts its task",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(labeled_trigger);
  auto d = decide(t, "issues", payload(labeled_payload));
  INFO(d.reason);
  REQUIRE(d.action == trigger_action::start);
  CHECK(d.task_id == "gh-octo-org-webapp-42");
  CHECK(d.reason.empty());
  CHECK(d.task == json::parse(R"({
    "prompt": "Fix #42 of octo-org/webapp: Login button misaligned\n\nThe button is 3px off on mobile.",
    "env": {"ISSUE_URL": "https://github.com/octo-org/webapp/issues/42",
            "DELIVERY": "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
    "id": "gh-octo-org-webapp-42",
    "repo": "/srv/src/webapp"})")
                    .as_object());
  // What it starts is a task the node accepts.
  auto task =
    parse_task(json::value(d.task), "trigger agent", builtin_config());
  INFO((task ? "" : task.error().to_string()));
  REQUIRE(task);
  CHECK(task->id == "gh-octo-org-webapp-42");
  REQUIRE(task->repo);
  CHECK(task->repo->path == "/srv/src/webapp");

  // Another repository: no `repo` from the map.
  auto other = payload(labeled_payload);
  at(other, {"repository"})["full_name"] = "octo-org/docs";
  auto o = decide(t, "issues", other);
  REQUIRE(o.action == trigger_action::start);
  CHECK(o.task_id == "gh-octo-org-docs-42");
  CHECK_FALSE(o.task.contains("repo"));
}

TEST_CASE("trigger decide: a comment mentioning the bot", "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(mention_trigger);
  auto p = payload(comment_payload);
  auto d = decide(t, "issue_comment", p);
  INFO(d.reason);
  REQUIRE(d.action == trigger_action::start);
  // The issue's number names the task, whoever commented.
  CHECK(d.task_id == "gh-octo-org-webapp-7");
  CHECK(prompt_of(d) ==
        "bob asks on https://github.com/octo-org/webapp/issues/7: Thanks for "
        "the report. @tasksup-bot, please have a look.");
  // The task's own repo is kept.
  CHECK(d.task.at("repo") ==
        json::parse(R"({"path": "/srv/src/other", "base": "main"})"));

  auto comment = [&](const char* body) {
    auto q = payload(comment_payload);
    at(q, {"comment"})["body"] = body;
    return decide(t, "issue_comment", q);
  };
  // A mention is a word, in any case.
  CHECK(comment("@TaskSup-Bot fix this").action == trigger_action::start);
  CHECK(comment("(cc @tasksup-bot)").action == trigger_action::start);
  CHECK(comment("ping @tasksup-bot.").action == trigger_action::start);
  auto ignored = comment("ask @tasksup-bots or write to me@tasksup-bot.org");
  CHECK(ignored.action == trigger_action::ignore);
  CHECK(ignored.reason == "the comment does not mention \"@tasksup-bot\"");
  CHECK(comment("tasksup-bot, fix").action == trigger_action::ignore);

  // The bot quoting its own name does not start itself again.
  auto own = payload(comment_payload);
  at(own, {"sender"})["login"] = "tasksup-bot";
  auto o = decide(t, "issue_comment", own);
  CHECK(o.action == trigger_action::ignore);
  CHECK(o.reason == "the comment is by \"@tasksup-bot\" itself");

  // An edited comment is another action.
  auto edited = payload(comment_payload);
  edited.as_object()["action"] = "edited";
  auto e = decide(t, "issue_comment", edited);
  CHECK(e.action == trigger_action::ignore);
  CHECK(e.reason == "action \"edited\", the trigger is on \"created\"");
}

TEST_CASE("trigger decide: a stranger's comment is refused", "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(mention_trigger);
  auto p = payload(comment_payload);
  at(p, {"comment"})["author_association"] = "NONE";
  at(p, {"comment", "user"})["login"] = "mallory";
  at(p, {"sender"})["login"] = "mallory";
  auto d = decide(t, "issue_comment", p);
  CHECK(d.action == trigger_action::refuse);
  CHECK(d.reason == "the author's association \"NONE\" and the sender "
                    "\"mallory\" are not allowed by the trigger");
  CHECK(d.task_id.empty());
  CHECK(d.task.empty());
  // A first-time contributor is no member either.
  at(p, {"comment"})["author_association"] = "FIRST_TIME_CONTRIBUTOR";
  CHECK(decide(t, "issue_comment", p).action == trigger_action::refuse);
  // A listed user is admitted whatever the association (logins in any case).
  at(p, {"sender"})["login"] = "Trusted-Friend";
  CHECK(decide(t, "issue_comment", p).action == trigger_action::start);

  // On an issue event the issue's author is the one checked: a stranger's
  // issue labeled `agent` is refused.
  auto l = cfg.trigger(labeled_trigger);
  auto q = payload(labeled_payload);
  at(q, {"issue"})["author_association"] = "NONE";
  auto r = decide(l, "issues", q);
  CHECK(r.action == trigger_action::refuse);
  CHECK(r.reason == "the author's association \"NONE\" and the sender "
                    "\"alice\" are not allowed by the trigger");
}

TEST_CASE("trigger decide: a closed issue stops its task", "[trigger]") {
  config_dir cfg;
  auto closed = payload(labeled_payload);
  closed.as_object()["action"] = "closed";
  at(closed, {"issue"})["state"] = "closed";
  closed.as_object().erase("label");
  // Whoever closed it (a stranger may close their own issue): stopping is
  // never refused.
  at(closed, {"issue"})["author_association"] = "NONE";
  for (const auto* text : {labeled_trigger, mention_trigger}) {
    auto t = cfg.trigger(text);
    auto d = decide(t, "issues", closed);
    INFO(d.reason);
    CHECK(d.action == trigger_action::stop);
    CHECK(d.task_id == "gh-octo-org-webapp-42");
    CHECK(d.task.empty());
  }
  // A closed pull request too; its number is the pull request's.
  auto pr = json::parse(R"({"action": "closed", "number": 5,
    "pull_request": {"number": 5, "title": "t", "state": "closed",
                     "merged": true, "author_association": "MEMBER"},
    "repository": {"full_name": "octo-org/webapp"},
    "sender": {"login": "alice"}})");
  auto p = decide(cfg.trigger(labeled_trigger), "pull_request", pr);
  CHECK(p.action == trigger_action::stop);
  CHECK(p.task_id == "gh-octo-org-webapp-5");

  auto keep = cfg.trigger(with("stop_on_close", "false"));
  auto k = decide(keep, "issues", closed);
  CHECK(k.action == trigger_action::ignore);
  CHECK(k.reason == "action \"closed\", the trigger is on \"labeled\"");
}

TEST_CASE("trigger decide: other events, actions and labels are ignored",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(labeled_trigger);
  auto d = decide(t, "issue_comment", payload(comment_payload));
  CHECK(d.action == trigger_action::ignore);
  CHECK(d.reason == "event \"issue_comment\", the trigger is on \"issues\"");
  CHECK(
    decide(t, "ping", json::parse(R"({"zen": "Keep it simple."})")).reason ==
    "event \"ping\", the trigger is on \"issues\"");

  auto other_label = payload(labeled_payload);
  other_label.as_object()["label"] = json::parse(R"({"name": "bug"})");
  auto l = decide(t, "issues", other_label);
  CHECK(l.action == trigger_action::ignore);
  CHECK(l.reason == "label \"bug\" added, the trigger is on \"agent\"");
  // Label names are case-insensitive on GitHub.
  other_label.as_object()["label"] = json::parse(R"({"name": "Agent"})");
  CHECK(decide(t, "issues", other_label).action == trigger_action::start);

  // Without an action, the label must be on the issue.
  auto any =
    cfg.trigger(with("on", R"({"event": "issues", "label": "agent"})"));
  auto opened = payload(labeled_payload);
  opened.as_object()["action"] = "opened";
  CHECK(decide(any, "issues", opened).action == trigger_action::start);
  at(opened, {"issue"})["labels"] = json::parse(R"([{"name": "bug"}])");
  auto u = decide(any, "issues", opened);
  CHECK(u.action == trigger_action::ignore);
  CHECK(u.reason == "the issue has no label \"agent\"");
}

TEST_CASE(
  "trigger decide: missing or mistyped fields are ignored, saying which",
  "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(labeled_trigger);
  auto reason = [&](json::value p) {
    auto d = decide(t, "issues", p);
    CHECK(d.action == trigger_action::ignore);
    CHECK(d.task.empty());
    return d.reason;
  };
  auto p = payload(labeled_payload);
  at(p, {"issue"}).erase("number");
  CHECK(reason(p) == "the payload has no positive integer at /issue/number");
  p = payload(labeled_payload);
  at(p, {"issue"})["number"] = "42";
  CHECK(reason(p) == "the payload has no positive integer at /issue/number");
  p = payload(labeled_payload);
  at(p, {"issue"})["number"] = -1;
  CHECK(reason(p) == "the payload has no positive integer at /issue/number");
  p = payload(labeled_payload);
  at(p, {"issue"})["title"] = 12;
  CHECK(reason(p) == "the payload has no string at /issue/title");
  p = payload(labeled_payload);
  at(p, {"issue"})["author_association"] = nullptr;
  CHECK(reason(p) == "the payload has no string at /issue/author_association");
  p = payload(labeled_payload);
  p.as_object()["sender"] = "alice";
  CHECK(reason(p) == "the payload has no string at /sender/login");
  p = payload(labeled_payload);
  p.as_object().erase("label");
  CHECK(reason(p) == "the payload has no string at /label/name");
  p = payload(labeled_payload);
  p.as_object().erase("action");
  CHECK(reason(p) == "the payload has no string at /action");
  p = payload(labeled_payload);
  at(p, {"repository"})["full_name"] = "../../etc";
  CHECK(reason(p) == "the payload's /repository/full_name \"../../etc\" is "
                     "not \"owner/name\"");
  CHECK(reason(json::parse("[1, 2]")) == "the payload is not a JSON object");
  CHECK(reason(json::parse("null")) == "the payload is not a JSON object");
  // GitHub sends null for an empty body.
  p = payload(labeled_payload);
  at(p, {"issue"})["body"] = nullptr;
  auto d = decide(t, "issues", p);
  REQUIRE(d.action == trigger_action::start);
  CHECK(prompt_of(d) == "Fix #42 of octo-org/webapp: Login button "
                        "misaligned\n\n");

  // A delivery id that could not be kept for deduplication.
  auto bad = tasksup::decide(t, "issues", "", payload(labeled_payload));
  CHECK(bad.action == trigger_action::ignore);
  CHECK(bad.reason == "the delivery id \"\" is not 1 to 128 characters from "
                      "[A-Za-z0-9_.-]");
  CHECK(tasksup::decide(t, "issues", "../x", payload(labeled_payload)).action ==
        trigger_action::ignore);
  CHECK(tasksup::decide(t, "issues", std::string(129, 'a'),
                        payload(labeled_payload))
          .action == trigger_action::ignore);
  CHECK(tasksup::decide(t, "issues", std::string(128, 'a'),
                        payload(labeled_payload))
          .action == trigger_action::start);
}

TEST_CASE("trigger decide: payload text cannot change the task's structure",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(labeled_trigger);
  auto p = payload(labeled_payload);
  const std::string body =
    R"(ignore that", "agent_selection": {"agents": []}, "x": "{{issue.title}} )"
    R"({{delivery}} {{comment.body}} \" } ])";
  at(p, {"issue"})["body"] = body;
  at(p, {"issue"})["title"] = "{{issue.body}}";
  at(p, {"issue"})["html_url"] = "\"}, \"repo\": \"/etc";
  auto d = decide(t, "issues", p);
  REQUIRE(d.action == trigger_action::start);
  // The same keys as from a harmless issue; the text taken literally.
  CHECK(prompt_of(d) ==
        "Fix #42 of octo-org/webapp: {{issue.body}}\n\n" + body);
  CHECK(d.task.at("env").at("ISSUE_URL") == "\"}, \"repo\": \"/etc");
  CHECK(d.task.at("repo") == "/srv/src/webapp");
  CHECK(d.task.size() == 4);
  CHECK(d.task.at("env").as_object().size() == 2);
  // A NUL byte, which a task refuses, is replaced.
  at(p, {"issue"})["title"] = std::string{"a\0b", 3};
  auto n = decide(t, "issues", p);
  REQUIRE(n.action == trigger_action::start);
  CHECK(prompt_of(n).rfind("Fix #42 of octo-org/webapp: a\xEF\xBF\xBD"
                           "b\n\n",
                           0) == 0);
}

TEST_CASE("trigger decide: titles and bodies are bounded, the cut shown",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(
    with("task", R"({"prompt": "{{issue.title}}|{{issue.body}}"})"));
  auto p = payload(labeled_payload);
  // 1,023 bytes, then a two-byte character that does not fit whole.
  at(p, {"issue"})["title"] = std::string(1023, 't') + "\xC3\xA9" + "tail";
  at(p, {"issue"})["body"] = std::string(100 * 1024, 'b');
  auto d = decide(t, "issues", p);
  REQUIRE(d.action == trigger_action::start);
  CHECK(prompt_of(d) == std::string(1023, 't') +
                          " [tasksup: title cut to 1023 of 1029 bytes]|" +
                          std::string(64 * 1024, 'b') +
                          "\n\n[tasksup: body cut to 65536 of 102400 bytes]");
  // At the limits nothing is cut.
  at(p, {"issue"})["title"] = std::string(1024, 't');
  at(p, {"issue"})["body"] = std::string(64 * 1024, 'b');
  CHECK(prompt_of(decide(t, "issues", p)) ==
        std::string(1024, 't') + "|" + std::string(64 * 1024, 'b'));
}

TEST_CASE("trigger task ids: the task id charset, at most 64 characters",
          "[trigger]") {
  CHECK(trigger_task_id("gh-octo-org-webapp-42") == "gh-octo-org-webapp-42");
  CHECK(trigger_task_id("deploy-a/b c:d") == "deploy-a-b-c-d");
  auto a = trigger_task_id("gh-" + std::string(39, 'o') + "-" +
                           std::string(100, 'r') + "-1");
  auto b = trigger_task_id("gh-" + std::string(39, 'o') + "-" +
                           std::string(100, 'r') + "-2");
  CHECK(a.size() == 64);
  CHECK(a.rfind("gh-" + std::string(39, 'o') + "-" + std::string(12, 'r') + "-",
                0) == 0);
  CHECK(a != b);
  CHECK(a == trigger_task_id("gh-" + std::string(39, 'o') + "-" +
                             std::string(100, 'r') + "-1"));
  CHECK(trigger_task_id("..") == "trigger");

  CHECK(valid_delivery_id(delivery));
  CHECK_FALSE(valid_delivery_id(""));
  CHECK_FALSE(valid_delivery_id("a b"));
  CHECK_FALSE(valid_delivery_id(std::string(129, 'a')));
}

// -- deciding: generic --------------------------------------------------------

TEST_CASE("trigger decide: a generic delivery", "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(R"({"source": "generic", "secret_file": "github.secret",
    "on": {"/event": "deploy", "/target/env": "prod"},
    "task": {"prompt": "deploy {{delivery}}: {{issue.title}}"}})");
  auto p = json::parse(R"({"event": "deploy", "target": {"env": "prod"},
                           "issue": {"title": "release 1.2"}})");
  // The event name is GitHub's header; a generic trigger reads none.
  auto d = tasksup::decide(t, "", "d-1", p);
  INFO(d.reason);
  REQUIRE(d.action == trigger_action::start);
  CHECK(d.task_id == "agent-d-1");
  CHECK(d.task == json::parse(R"({"prompt": "deploy d-1: release 1.2",
                                  "id": "agent-d-1"})")
                    .as_object());

  auto q = p;
  at(q, {"target"})["env"] = "staging";
  auto s = tasksup::decide(t, "", "d-2", q);
  CHECK(s.action == trigger_action::ignore);
  CHECK(s.reason == "\"/target/env\" is \"staging\", the trigger wants "
                    "\"prod\"");
  q = p;
  q.as_object().erase("target");
  CHECK(tasksup::decide(t, "", "d-3", q).reason ==
        "the payload has no string at \"/target/env\"");
  q = p;
  q.as_object()["event"] = json::parse(R"(["deploy"])");
  CHECK(tasksup::decide(t, "", "d-4", q).action == trigger_action::ignore);
  // A placeholder the payload cannot fill.
  q = p;
  q.as_object().erase("issue");
  auto m = tasksup::decide(t, "", "d-5", q);
  CHECK(m.action == trigger_action::ignore);
  CHECK(m.reason == "the payload has no string at /issue/title");
  // Never a stop, closed or not.
  q = p;
  q.as_object()["action"] = "closed";
  CHECK(tasksup::decide(t, "issues", "d-6", q).action == trigger_action::start);
}

// -- reports ------------------------------------------------------------------

TEST_CASE("trigger file: a report goes to a command and/or a URL, for the "
          "outcomes named",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(with("report", R"({
    "command": ["gh", "issue", "comment", "{{issue.number}}", "--repo",
                "{{repository.full_name}}", "--body-file", "-"],
    "url": "http://127.0.0.1:9000/results", "on": ["failed"]})"));
  REQUIRE(t.report);
  CHECK(t.report->command.size() == 8);
  CHECK(t.report->url == "http://127.0.0.1:9000/results");
  CHECK(t.report->on == std::vector<std::string>{"failed"});
  // Every outcome unless `on` names some.
  auto all = cfg.trigger(with("report", R"({"url": "http://relay/x"})"));
  REQUIRE(all.report);
  CHECK(all.report->on ==
        std::vector<std::string>{"succeeded", "failed", "stopped"});
  CHECK_FALSE(cfg.trigger(labeled_trigger).report);
}

TEST_CASE("trigger file: report refusals name the file and the JSON pointer",
          "[trigger]") {
  config_dir cfg;
  CHECK(cfg.refusal(with("report", R"({})")) ==
        "agent.json: /report: expected \"command\" and/or \"url\": where "
        "the result goes");
  CHECK(cfg.refusal(with("report", R"({"url": "http://x/", "to": 1})")) ==
        "agent.json: /report/to: unknown key \"to\" (allowed: command, url, "
        "on)");
  CHECK(cfg.refusal(with("report", R"({"command": []})")) ==
        "agent.json: /report/command: expected the command and its "
        "arguments: 1 to 64 strings");
  CHECK(cfg.refusal(with("report", R"({"command": ["{{task.id}}.sh"]})")) ==
        "agent.json: /report/command/0: the command itself takes no "
        "placeholder");
  // A title or body is payload text: never an argument.
  auto body =
    cfg.refusal(with("report", R"({"command": ["post", "{{issue.title}}"]})"));
  CHECK_THAT(body, Catch::StartsWith("agent.json: /report/command/1: unknown "
                                     "placeholder \"issue.title\" for a "
                                     "report (known: \"issue.number\""));
  CHECK(cfg.refusal(with("report", R"({"command": ["post", "{{delivery"]})")) ==
        "agent.json: /report/command/1: a placeholder is not closed: "
        "\"{{delivery\"");
  CHECK_THAT(cfg.refusal(with("report", R"({"url": "https://example.com/"})")),
             Catch::StartsWith("agent.json: /report/url: expected "
                               "http://HOST[:PORT][/PATH]"));
  CHECK_THAT(
    cfg.refusal(with("report", R"({"url": "http://x/{{issue.number}}"})")),
    Catch::StartsWith("agent.json: /report/url: expected"));
  CHECK(cfg.refusal(with("report", R"({"url": "http://x/", "on": []})")) ==
        "agent.json: /report/on: names no outcome: leave \"on\" out to "
        "report every outcome");
  CHECK(cfg.refusal(with("report", R"({"url": "http://x/", "on": ["won"]})")) ==
        "agent.json: /report/on/0: expected one of \"succeeded\", "
        "\"failed\", \"stopped\", got \"won\"");
}

TEST_CASE("trigger decide: a start carries its report, the command's "
          "placeholders filled in, and what the report says of the delivery",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(with("report", R"({
    "command": ["report.sh", "--issue={{issue.number}}", "{{issue.url}}",
                "{{repository.full_name}}", "{{sender.login}}",
                "{{delivery}}", "{{task.id}}", "{{task.outcome}}"]})"));
  auto d = decide(t, "issues", payload(labeled_payload));
  INFO(d.reason);
  REQUIRE(d.action == trigger_action::start);
  REQUIRE(d.report);
  CHECK(d.report->command ==
        std::vector<std::string>{"report.sh", "--issue=42",
                                 "https://github.com/octo-org/webapp/issues/42",
                                 "octo-org/webapp", "alice", delivery,
                                 d.task_id, "{{task.outcome}}"});
  CHECK(d.context == json::parse(R"({"trigger": "agent",
    "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "event": "issues",
    "repository": "octo-org/webapp",
    "issue_url": "https://github.com/octo-org/webapp/issues/42",
    "sender": "alice", "issue_number": 42})")
                       .as_object());
  // No report without `report`; the context all the same.
  auto plain =
    decide(cfg.trigger(labeled_trigger), "issues", payload(labeled_payload));
  CHECK_FALSE(plain.report);
  CHECK(plain.context.at("issue_number") == 42);
}

TEST_CASE("trigger decide: a report placeholder the payload cannot fill "
          "safely ignores the delivery",
          "[trigger]") {
  config_dir cfg;
  auto t = cfg.trigger(with("report", R"({
    "command": ["report.sh", "{{issue.url}}", "{{sender.login}}"]})"));
  // A URL that is not http(s), or that would be an option.
  auto p = payload(labeled_payload);
  at(p, {"issue"})["html_url"] = "--upload-file=/etc/passwd";
  auto d = decide(t, "issues", p);
  CHECK(d.action == trigger_action::ignore);
  CHECK_THAT(d.reason, Catch::Contains("/issue/html_url"));
  // Nothing a shell would read, should a script's text hold the value.
  for (auto url : {"https://github.com/x y", "https://x/$(reboot)",
                   "https://x/a;b", "https://x/a&b", "https://x/'a'",
                   "https://x/*", "ftp://x/1", "https://"}) {
    INFO(url);
    at(p, {"issue"})["html_url"] = url;
    CHECK(decide(t, "issues", p).action == trigger_action::ignore);
  }
  // A sender that is no login; an app's "[bot]" is one.
  p = payload(labeled_payload);
  at(p, {"sender"})["login"] = "a;b";
  auto s = decide(t, "issues", p);
  CHECK(s.action == trigger_action::ignore);
  CHECK_THAT(s.reason, Catch::Contains("/sender/login"));
  at(p, {"sender"})["login"] = "-rf";
  auto option = decide(t, "issues", p);
  CHECK(option.action == trigger_action::ignore);
  CHECK(option.reason ==
        "the report's {{sender.login}} would begin with \"-rf\"");
  at(p, {"sender"})["login"] = "renovate[bot]";
  // (allowed by the member's association)
  auto bot = decide(t, "issues", p);
  INFO(bot.reason);
  REQUIRE(bot.action == trigger_action::start);
  CHECK(bot.report->command[2] == "renovate[bot]");
  // Missing: ignored, saying where.
  p = payload(labeled_payload);
  at(p, {"issue"}).erase("html_url");
  CHECK(decide(t, "issues", p).reason ==
        "the payload has no string at /issue/html_url");
}
