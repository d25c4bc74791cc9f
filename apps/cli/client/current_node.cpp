#include "current_node.hpp"

#include "node_address.hpp"
#include "state_dir.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tasksup::app {

namespace {

/// This user's home: $HOME, else the password database's; empty when
/// neither names an absolute directory.
std::string home_dir() {
  if (auto* home = std::getenv("HOME"); home && *home == '/')
    return home;
  if (auto* pw = ::getpwuid(::geteuid());
      pw && pw->pw_dir && *pw->pw_dir == '/')
    return pw->pw_dir;
  return {};
}

std::string env_text(const char* name) {
  auto* value = std::getenv(name);
  return value ? value : "";
}

} // namespace

std::string current_node_path() {
  if (auto* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg == '/')
    return std::string{xdg} + "/tasksup/current-node";
  auto home = home_dir();
  return home.empty() ? std::string{} : home + "/.config/tasksup/current-node";
}

std::optional<current_node> read_current_node() {
  auto path = current_node_path();
  if (path.empty())
    return std::nullopt;
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  auto doc = boost::json::parse(text.str(), ec);
  auto* o = ec ? nullptr : doc.if_object();
  if (!o)
    return std::nullopt;
  auto* node = o->if_contains("node");
  auto* dir = o->if_contains("state_dir");
  if (!node || !node->is_string() || !dir || !dir->is_string())
    return std::nullopt;
  current_node out{
    std::string{node->get_string()}, std::string{dir->get_string()}, {}};
  if (auto* certs = o->if_contains("certs_dir"); certs && certs->is_string())
    out.certs_dir = std::string{certs->get_string()};
  if (!parse_node_address(out.node) || out.state_dir.empty() ||
      out.state_dir.front() != '/')
    return std::nullopt;
  return out;
}

expected<bool> write_current_node(const current_node& x) {
  auto path = current_node_path();
  auto fail = [&](const std::string& why) {
    return error{path, {}, "cannot record the current node: " + why};
  };
  if (path.empty())
    return error{{},
                 {},
                 "cannot record the current node: neither $XDG_CONFIG_HOME "
                 "nor a home directory is set"};
  auto dir = std::filesystem::path{path}.parent_path();
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(std::strerror(errno));
  }
  boost::json::object o;
  o["node"] = x.node;
  o["state_dir"] = x.state_dir;
  if (!x.certs_dir.empty())
    o["certs_dir"] = x.certs_dir;
  auto text = boost::json::serialize(o) + "\n";
  auto tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(std::strerror(errno));
  auto written = ::write(fd, text.data(), text.size());
  auto write_errno = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());
    return fail(written < 0 ? std::strerror(write_errno) : "short write");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(why);
  }
  return true;
}

bool clear_current_node(const std::optional<current_node>& only_if) {
  auto path = current_node_path();
  if (path.empty())
    return false;
  if (only_if) {
    auto now = read_current_node();
    if (!now || now->node != only_if->node ||
        now->state_dir != only_if->state_dir ||
        now->certs_dir != only_if->certs_dir)
      return false;
  }
  return ::unlink(path.c_str()) == 0;
}

std::string client_address_for(const std::string& host, unsigned port) {
  auto h = host;
  if (h == "0.0.0.0" || h.empty())
    h = "127.0.0.1";
  else if (h == "::")
    h = "::1";
  return node_address{h, static_cast<std::uint16_t>(port)}.to_string();
}

node_target resolve_node_target(const std::string& node_flag,
                                const std::string& state_dir_flag) {
  node_target out;
  auto current = read_current_node();
  if (!node_flag.empty()) {
    out.node = node_flag;
    out.node_source = "--node";
  } else if (auto env = env_text("TASKSUP_NODE"); !env.empty()) {
    out.node = env;
    out.node_source = "$TASKSUP_NODE";
  } else if (current) {
    out.node = current->node;
    out.node_source = "the current node";
  } else {
    out.node = default_node_text();
    out.node_source = "the default";
  }
  // The current node's state directory goes with its address: for any
  // other node it would name the wrong certificates.
  auto same_node = [&] {
    if (!current)
      return false;
    auto a = parse_node_address(out.node);
    auto b = parse_node_address(current->node);
    return a && b && a->to_string() == b->to_string();
  };
  if (!state_dir_flag.empty()) {
    out.state_dir = absolute_dir(state_dir_flag);
    out.state_dir_source = "--state-dir";
  } else if (auto env = env_text("TASKSUP_STATE_DIR"); !env.empty()) {
    out.state_dir = absolute_dir(env);
    out.state_dir_source = "$TASKSUP_STATE_DIR";
  } else if (same_node()) {
    out.state_dir = current->state_dir;
    out.state_dir_source = "the current node";
  } else {
    out.state_dir = absolute_dir(default_state_dir());
    out.state_dir_source = "the default";
  }
  out.certs_dir =
    out.state_dir_source == "the current node" && !current->certs_dir.empty()
      ? current->certs_dir
      : out.state_dir + "/certs";
  return out;
}

std::string node_target_help() {
  return "The node is --node HOST:PORT if given, else $TASKSUP_NODE if set, "
         "else the current node (recorded by the last `tasksup serve` to "
         "start, or by `tasksup context use`; see `tasksup context`), else "
         "127.0.0.1:" +
         std::to_string(default_node_port) +
         ". Its state directory (certificates, control socket) is "
         "--state-dir DIR if given, else $TASKSUP_STATE_DIR if set, else the "
         "current node's when talking to that node, else the default "
         "($XDG_STATE_HOME/tasksup, /var/lib/tasksup for root, else "
         "~/.local/state/tasksup).";
}

} // namespace tasksup::app
