#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"

#include <utility>

namespace tasksup {

using namespace detail;

config_set builtin_config() {
  config_set cfg;
  cfg.classifier_rules = default_classifier_rules();
  return cfg;
}

expected<supervisor_config>
parse_supervisor_config(const json::value& doc, std::string_view where,
                        const supervisor_config& base) {
  return guarded([&] {
    reader r{where};
    auto cfg = base;
    read_supervisor(r, doc, "", cfg);
    return cfg;
  });
}

expected<std::vector<classifier_rule>>
parse_classifier_rules(const json::value& doc, std::string_view where) {
  return guarded([&] { return read_rules(reader{where}, doc, ""); });
}

expected<environment_config> parse_environment(const json::value& doc,
                                               std::string_view where,
                                               std::string name,
                                               const profile_map& profiles) {
  return guarded([&] {
    reader r{where, profiles};
    if (!valid_identifier(name))
      r.fail("", "invalid environment name " + quote(name) +
                   " (expected 1 to 64 characters from [A-Za-z0-9_.-])");
    return read_environment(r, doc, std::move(name), supervisor_config{});
  });
}

expected<node_config> parse_node_config(const json::value& doc,
                                        std::string_view where,
                                        const profile_map& profiles) {
  return guarded([&] { return read_node(reader{where, profiles}, doc); });
}

expected<task_spec> parse_task_as_written(const json::value& doc,
                                          std::string_view where,
                                          const profile_map& profiles) {
  return guarded([&] { return read_task(reader{where, profiles}, doc); });
}

expected<task_spec> parse_task(const json::value& doc, std::string_view where,
                               const config_set& cfg) {
  auto task = parse_task_as_written(doc, where, cfg.profiles);
  if (!task)
    return task;
  if (doc.is_object())
    if (auto applied = apply_role(*task, doc.get_object(), cfg.roles, where);
        !applied)
      return applied.error();
  return resolve_task(std::move(*task), cfg, where);
}

} // namespace tasksup
