#include "tasksup/supervisor/role.hpp"

#include "config_parse.hpp"
#include "config_reader.hpp"

#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/text.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

namespace tasksup {

namespace detail {

std::string read_schema(const reader& r, const json::value& v,
                        const std::string& path) {
  auto schema = answer_schema::compile(v);
  if (!schema) {
    auto& e = schema.error();
    r.fail(path + e.path, e.what);
  }
  return json::serialize(v);
}

namespace {

/// Most files a task's `target_files` may name.
constexpr std::size_t max_target_files = 64;

/// Whether `name` may appear as `{{name}}` in a role's template.
bool known_name(std::string_view name) {
  return std::find(std::begin(role_template_names),
                   std::end(role_template_names),
                   name) != std::end(role_template_names);
}

/// Every `{{...}}` of `text` must be a known name.
void check_template(const reader& r, std::string_view text,
                    const std::string& path) {
  for (auto at = text.find("{{"); at != std::string_view::npos;
       at = text.find("{{", at + 2)) {
    auto close = text.find("}}", at);
    if (close == std::string_view::npos)
      r.fail(path, "a template is not closed: " + quote(text.substr(at, 40)));
    auto name = text.substr(at + 2, close - at - 2);
    if (!known_name(name))
      r.fail(path, "unknown template name " + quote(name) +
                     " (known: " + join_quoted(role_template_names) + ")");
  }
}

role_spec read_role(const reader& r, const json::value& v, std::string name) {
  const auto& obj = r.object(v, "");
  r.check_keys(obj, "",
               {"base_role", "description", "prompt_template", "answer_schema",
                "gates", "gate_timeout_s"});
  role_spec role;
  role.name = std::move(name);
  if (const auto* x = obj.if_contains("base_role"))
    role.base_role = r.identifier(*x, "/base_role", "a role name");
  if (const auto* x = obj.if_contains("description"))
    role.description = r.string(*x, "/description");
  if (const auto* x = obj.if_contains("prompt_template")) {
    role.prompt_template = r.nonempty_string(*x, "/prompt_template");
    check_template(r, role.prompt_template, "/prompt_template");
  }
  if (const auto* x = obj.if_contains("answer_schema"))
    role.answer_schema = read_schema(r, *x, "/answer_schema");
  double gate_timeout = 600.0;
  if (const auto* x = obj.if_contains("gate_timeout_s"))
    gate_timeout = r.seconds(*x, "/gate_timeout_s", true);
  if (const auto* x = obj.if_contains("gates")) {
    const auto& arr = r.array(*x, "/gates");
    std::vector<command_spec> gates;
    for (std::size_t i = 0; i < arr.size(); ++i)
      gates.push_back(
        read_command(r, arr[i], child("/gates", i), gate_timeout));
    role.gates = std::move(gates);
  }
  return role;
}

/// Reads a text file for the context: at most `cap` bytes of it, cut at a
/// character boundary; the second is its whole size.
std::pair<std::string, std::uintmax_t>
read_context_file(const reader& r, const std::string& file,
                  const std::string& path, std::size_t cap) {
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  if (ec || !std::filesystem::is_regular_file(file, ec))
    r.fail(path, "cannot read " + quote(file) +
                   (ec ? ": " + ec.message() : ": not a regular file"));
  std::ifstream in{file, std::ios::binary};
  std::string text(static_cast<std::size_t>(std::min<std::uintmax_t>(
                     size, static_cast<std::uintmax_t>(cap))),
                   '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in)
    r.fail(path, "cannot read " + quote(file));
  if (text.find('\0') != std::string::npos)
    r.fail(path, quote(file) + " is not text (it holds NUL bytes)");
  // A cut inside a character drops the partial character.
  auto bad = first_invalid_utf8(text);
  if (bad != std::string::npos && text.size() == cap && text.size() - bad < 4)
    text.resize(bad);
  else if (bad != std::string::npos)
    r.fail(path, quote(file) + " is not UTF-8 text");
  return {std::move(text), size};
}

/// The context of a task document: its `target_files` (relative to its
/// repository), then its `extra_context`, within `cap` bytes, each cut
/// one saying so.
std::string pack_context(const reader& r, const json::object& doc,
                         const task_spec& task, std::size_t cap) {
  std::string out;
  auto room = [&] { return cap > out.size() ? cap - out.size() : 0; };
  auto add = [&](std::string_view head, std::string body,
                 std::uintmax_t whole) {
    out += "=== ";
    out += head;
    out += " ===\n";
    out += body;
    if (!body.empty() && body.back() != '\n')
      out += '\n';
    if (body.size() < whole)
      out += "[tasksup: " + std::string{head} + " cut to " +
             std::to_string(body.size()) + " of " + std::to_string(whole) +
             " bytes: the context is limited to " + std::to_string(cap) +
             " bytes (context_max_bytes)]\n";
  };
  if (const auto* x = doc.if_contains("target_files")) {
    const auto& arr = r.array(*x, "/target_files");
    if (arr.size() > max_target_files)
      r.fail("/target_files",
             "expected at most " + std::to_string(max_target_files) + " files");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto path = child("/target_files", i);
      auto name = r.nonempty_string(arr[i], path);
      std::filesystem::path file{name};
      if (file.is_relative()) {
        if (!task.repo)
          r.fail(path, "a relative path needs a repository task (\"repo\"): "
                       "it is relative to the repository");
        file = std::filesystem::path{task.repo->path} / file;
        if (file.lexically_normal().string().rfind(task.repo->path + "/", 0) !=
            0)
          r.fail(path, quote(name) + " is outside the repository");
      }
      auto lexical = file.lexically_normal().string();
      auto [text, whole] = read_context_file(r, lexical, path, room());
      add(name, std::move(text), whole);
    }
  }
  if (const auto* x = doc.if_contains("extra_context")) {
    std::vector<std::string> texts;
    if (x->is_string()) {
      texts.push_back(r.string(*x, "/extra_context"));
    } else {
      const auto& arr = r.array(*x, "/extra_context");
      for (std::size_t i = 0; i < arr.size(); ++i)
        texts.push_back(r.string(arr[i], child("/extra_context", i)));
    }
    for (auto& t : texts) {
      auto whole = t.size();
      auto keep = std::min(t.size(), room());
      while (keep > 0 && keep < t.size() &&
             (static_cast<unsigned char>(t[keep]) & 0xC0) == 0x80)
        --keep;
      t.resize(keep);
      add("extra context", std::move(t), whole);
    }
  }
  return out;
}

} // namespace

} // namespace detail

std::string render_template(
  std::string_view text,
  const std::vector<std::pair<std::string_view, std::string_view>>& values) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (at < text.size()) {
    auto open = text.find("{{", at);
    if (open == std::string_view::npos)
      break;
    auto close = text.find("}}", open);
    if (close == std::string_view::npos)
      break;
    auto name = text.substr(open + 2, close - open - 2);
    auto hit = std::find_if(values.begin(), values.end(),
                            [&](auto& kv) { return kv.first == name; });
    out.append(text.substr(at, open - at));
    if (hit == values.end())
      out.append(text.substr(open, close + 2 - open));
    else
      out.append(hit->second);
    at = close + 2;
  }
  out.append(text.substr(std::min(at, text.size())));
  return out;
}

expected<role_spec> parse_role(const boost::json::value& doc,
                               std::string_view where, std::string name) {
  return detail::guarded(
    [&] { return detail::read_role(detail::reader{where}, doc, name); });
}

expected<role_map> resolve_roles(role_map roles, const std::string& dir) {
  role_map out;
  for (auto& [name, role] : roles) {
    auto where = (std::filesystem::path{dir} / (name + ".json")).string();
    // The chain from this role to its root, checked.
    std::vector<const role_spec*> chain{&role};
    while (!chain.back()->base_role.empty()) {
      const auto& base = chain.back()->base_role;
      auto it = roles.find(base);
      if (it == roles.end())
        return error{where, "/base_role",
                     "unknown role " + detail::quote(base) + " (no " +
                       detail::quote(base + ".json") + " in " +
                       detail::quote(dir) + ")"};
      auto seen = std::find(chain.begin(), chain.end(), &it->second);
      if (seen != chain.end()) {
        std::string names;
        for (auto* r : chain)
          names += r->name + " -> ";
        return error{where, "/base_role",
                     "the roles form a cycle: " + names + base};
      }
      chain.push_back(&it->second);
      if (chain.size() > max_role_depth)
        return error{where, "/base_role",
                     "more than " + std::to_string(max_role_depth) +
                       " roles deep"};
    }
    // Applied from the root down: a key a role names replaces its base's.
    role_spec merged;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto& r = **it;
      if (!r.description.empty())
        merged.description = r.description;
      if (!r.prompt_template.empty())
        merged.prompt_template = r.prompt_template;
      if (!r.answer_schema.empty())
        merged.answer_schema = r.answer_schema;
      if (r.gates)
        merged.gates = r.gates;
    }
    merged.name = name;
    merged.base_role = role.base_role;
    out.emplace(name, std::move(merged));
  }
  return out;
}

expected<role_map> load_roles_dir(const std::string& dir) {
  role_map roles;
  auto files = detail::json_files_in(dir);
  if (!files)
    return files.error();
  for (auto& file : *files) {
    auto name = file.stem().string();
    if (!detail::valid_identifier(name))
      return error{file.string(), "",
                   "a role's file name must be a role name ([A-Za-z0-9_.-])"};
    auto doc = read_json_file(file.string());
    if (!doc)
      return doc.error();
    auto role = parse_role(*doc, file.string(), name);
    if (!role)
      return role.error();
    roles.emplace(name, std::move(*role));
  }
  return resolve_roles(std::move(roles), dir);
}

expected<bool> apply_role(task_spec& task, const boost::json::object& doc,
                          const role_map& roles, std::string_view where) {
  return detail::guarded([&] {
    detail::reader r{where};
    const role_spec* role = nullptr;
    if (const auto* x = doc.if_contains("role")) {
      task.role = r.identifier(*x, "/role", "a role name");
      auto it = roles.find(task.role);
      if (it == roles.end()) {
        std::vector<std::string_view> names;
        for (auto& [name, _] : roles)
          names.push_back(name);
        r.fail("/role", "unknown role " + detail::quote(task.role) +
                          (names.empty()
                             ? std::string{" (the config directory has no "
                                           "roles/)"}
                             : " (known: " + detail::join_quoted(names) + ")"));
      }
      role = &it->second;
    }
    auto cap = default_context_bytes;
    if (const auto* x = doc.if_contains("context_max_bytes"))
      cap = static_cast<std::size_t>(r.int_value(
        *x, "/context_max_bytes", 0, static_cast<int>(max_context_bytes)));
    auto context = detail::pack_context(r, doc, task, cap);
    if (role != nullptr) {
      if (task.answer_schema.empty())
        task.answer_schema = role->answer_schema;
      if (task.gates.empty() && role->gates && task.repo)
        task.gates = *role->gates;
      if (!role->prompt_template.empty())
        task.prompt = render_template(role->prompt_template,
                                      {{"prompt", task.prompt},
                                       {"context", context},
                                       {"answer_schema", task.answer_schema}});
      else if (!context.empty())
        task.prompt += "\n\n" + context;
    } else if (!context.empty()) {
      task.prompt += "\n\n" + context;
    }
    // The next attempt is told what was wrong with the answer, unless the
    // task turned feedback off.
    if (!task.answer_schema.empty() && !doc.contains("feedback"))
      task.feedback.enabled = true;
    return true;
  });
}

} // namespace tasksup
