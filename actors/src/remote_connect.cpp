#include "tasksup/actors/remote_connect.hpp"

#include <caf/actor_cast.hpp>
#include <caf/duration.hpp>
#include <caf/function_view.hpp>
#include <caf/sec.hpp>

#include <tuple>
#include <utility>

namespace tasksup {

void disable_connection_timeout(caf::actor_system_config& cfg) {
  cfg.set("middleman.connection-timeout", caf::timespan{0});
}

caf::expected<caf::actor>
connect_within(const caf::io::middleman_actor& connector,
               const std::string& host, std::uint16_t port,
               caf::timespan deadline, const std::set<std::string>& expected) {
  auto connect = caf::make_function_view(connector, caf::duration{deadline});
  auto res = connect(caf::connect_atom::value, host, port);
  if (!res)
    return std::move(res.error());
  auto& ptr = std::get<1>(*res);
  if (!ptr)
    return caf::make_error(caf::sec::no_actor_published_at_port);
  if (!expected.empty() && std::get<2>(*res) != expected)
    return caf::make_error(
      caf::sec::unexpected_actor_messaging_interface,
      "the actor published there has another interface (another version?)");
  return caf::actor_cast<caf::actor>(std::move(ptr));
}

} // namespace tasksup
