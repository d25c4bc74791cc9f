#include "tasksup/runtime/detail/shim_record.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace {

constexpr std::string_view shim_header = "tasksup-shim 1";
constexpr std::string_view exit_header = "tasksup-shim-exit 1";
/// Linux's largest pid (PID_MAX_LIMIT).
constexpr std::uint64_t max_pid = 4'194'304;
constexpr std::size_t max_warnings = 16;
constexpr std::size_t max_line_text = 1024;

/// One line of free text: no line breaks or NULs, bounded.
std::string one_line(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, max_line_text))
    out += c == '\n' || c == '\r' || c == '\0' ? ' ' : c;
  return out;
}

std::optional<std::uint64_t> parse_number(std::string_view s,
                                          std::uint64_t max) {
  if (s.empty() || s.size() > 20)
    return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (max - d) / 10)
      return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

/// Splits a record into its header and `key value` lines; every line must
/// end in a newline (a record cut short by a crash has none at its end).
struct record_lines {
  std::vector<std::pair<std::string, std::string>> fields;
};

expected<record_lines> split_record(std::string_view text,
                                    std::string_view header,
                                    const std::string& path) {
  if (text.size() > max_record_bytes)
    return error{path, "",
                 "record is longer than " + std::to_string(max_record_bytes) +
                   " bytes"};
  if (text.find('\0') != std::string_view::npos)
    return error{path, "", "record contains a NUL byte"};
  if (text.empty() || text.back() != '\n')
    return error{path, "", "record is incomplete (no final newline)"};
  auto nl = text.find('\n');
  if (text.substr(0, nl) != header)
    return error{path, "",
                 "not a record of this tasksup version (expected '" +
                   std::string{header} + "' on its first line)"};
  record_lines out;
  text.remove_prefix(nl + 1);
  while (!text.empty()) {
    nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    auto sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0)
      return error{path, "", "malformed line '" + one_line(line) + "'"};
    out.fields.emplace_back(std::string{line.substr(0, sp)},
                            std::string{line.substr(sp + 1)});
  }
  return out;
}

/// Collects a record's fields, each known and at most once.
class field_reader {
public:
  field_reader(const std::string& path, std::vector<std::string> known)
    : path_(path), known_(std::move(known)) {}

  std::optional<error> take(const record_lines& lines) {
    for (auto& [k, v] : lines.fields) {
      bool known = false;
      for (auto& name : known_)
        known = known || name == k;
      if (!known)
        return error{path_, k, "unknown field"};
      if (k == "warning") {
        if (warnings_.size() == max_warnings)
          return error{path_, k, "more than 16 warnings"};
        warnings_.push_back(v);
        continue;
      }
      if (!values_.emplace(k, v).second)
        return error{path_, k, "appears twice"};
    }
    return std::nullopt;
  }

  expected<std::uint64_t> number(const std::string& key, std::uint64_t max,
                                 std::uint64_t min = 0) const {
    auto it = values_.find(key);
    if (it == values_.end())
      return error{path_, key, "missing"};
    auto v = parse_number(it->second, max);
    if (!v || *v < min)
      return error{path_, key,
                   "expected a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max) + ", got '" +
                     one_line(it->second) + "'"};
    return *v;
  }

  const std::string* text(const std::string& key) const {
    auto it = values_.find(key);
    return it == values_.end() ? nullptr : &it->second;
  }

  std::vector<std::string> warnings_;

private:
  const std::string& path_;
  std::vector<std::string> known_;
  std::map<std::string, std::string> values_;
};

/// The fields of /proc/<pid>/stat after the command name (which may hold
/// spaces and parentheses: it ends at the last ')').
std::optional<std::vector<std::string_view>> stat_fields(pid_t pid,
                                                         std::string& buf) {
  auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text)
    return std::nullopt;
  buf = std::move(*text);
  auto close = buf.rfind(')');
  if (close == std::string::npos || close + 2 > buf.size())
    return std::nullopt;
  std::string_view rest{buf};
  rest.remove_prefix(close + 2);
  std::vector<std::string_view> fields; // fields[0] is field 3 (state)
  while (!rest.empty()) {
    auto sp = rest.find(' ');
    fields.push_back(rest.substr(0, sp));
    if (sp == std::string_view::npos)
      break;
    rest.remove_prefix(sp + 1);
  }
  return fields;
}

} // namespace

std::string format_shim_record(const shim_record& r) {
  std::string out{shim_header};
  out += "\nshim_pid " + std::to_string(r.shim_pid);
  out += "\nshim_start " + std::to_string(r.shim_start);
  out += "\nagent_pid " + std::to_string(r.agent_pid);
  out += "\nagent_pgid " + std::to_string(r.agent_pgid);
  out += "\nagent_start " + std::to_string(r.agent_start);
  if (!r.cgroup.empty())
    out += "\ncgroup " + one_line(r.cgroup);
  out += '\n';
  return out;
}

expected<shim_record> parse_shim_record(std::string_view text,
                                        const std::string& path) {
  auto lines = split_record(text, shim_header, path);
  if (!lines)
    return lines.error();
  field_reader f{path,
                 {"shim_pid", "shim_start", "agent_pid", "agent_pgid",
                  "agent_start", "cgroup"}};
  if (auto err = f.take(*lines))
    return *err;
  shim_record r;
  auto shim_pid = f.number("shim_pid", max_pid, 2);
  auto shim_start = f.number("shim_start", UINT64_MAX);
  auto agent_pid = f.number("agent_pid", max_pid, 2);
  auto agent_pgid = f.number("agent_pgid", max_pid, 2);
  auto agent_start = f.number("agent_start", UINT64_MAX);
  for (auto* v :
       {&shim_pid, &shim_start, &agent_pid, &agent_pgid, &agent_start})
    if (!*v)
      return v->error();
  r.shim_pid = static_cast<pid_t>(*shim_pid);
  r.shim_start = *shim_start;
  r.agent_pid = static_cast<pid_t>(*agent_pid);
  r.agent_pgid = static_cast<pid_t>(*agent_pgid);
  r.agent_start = *agent_start;
  if (r.agent_pgid != r.agent_pid)
    return error{path, "agent_pgid",
                 "the agent leads its own process group, so it must equal "
                 "agent_pid"};
  if (r.agent_pid == r.shim_pid)
    return error{path, "agent_pid", "must differ from shim_pid"};
  if (auto* cg = f.text("cgroup")) {
    if (cg->empty() || cg->front() != '/' ||
        cg->find("/../") != std::string::npos ||
        cg->compare(0, 15, "/sys/fs/cgroup/") != 0)
      return error{path, "cgroup",
                   "expected a directory below /sys/fs/cgroup/"};
    r.cgroup = *cg;
  }
  return r;
}

std::string format_exit_record(const exit_record& r) {
  std::string out{exit_header};
  out += "\nstarted " + std::string{r.started ? "1" : "0"};
  out += "\nexit_code " + std::to_string(r.exit_code);
  out += "\nsignal " + std::to_string(r.signal);
  out += "\nbytes_not_logged " + std::to_string(r.bytes_not_logged);
  out += "\nduration_us " + std::to_string(r.duration_us);
  if (!r.error.empty())
    out += "\nerror " + one_line(r.error);
  for (std::size_t i = 0; i < r.warnings.size() && i < max_warnings; ++i)
    if (!r.warnings[i].empty())
      out += "\nwarning " + one_line(r.warnings[i]);
  out += '\n';
  return out;
}

expected<exit_record> parse_exit_record(std::string_view text,
                                        const std::string& path) {
  auto lines = split_record(text, exit_header, path);
  if (!lines)
    return lines.error();
  field_reader f{path,
                 {"started", "exit_code", "signal", "bytes_not_logged",
                  "duration_us", "error", "warning"}};
  if (auto err = f.take(*lines))
    return *err;
  exit_record r;
  auto started = f.number("started", 1);
  auto code = f.number("exit_code", 255);
  auto sig = f.number("signal", 64);
  auto unlogged = f.number("bytes_not_logged", UINT64_MAX);
  auto duration = f.number("duration_us", UINT64_MAX);
  for (auto* v : {&started, &code, &sig, &unlogged, &duration})
    if (!*v)
      return v->error();
  r.started = *started == 1;
  r.exit_code = static_cast<int>(*code);
  r.signal = static_cast<int>(*sig);
  r.bytes_not_logged = *unlogged;
  r.duration_us = *duration;
  if (r.signal != 0 && r.exit_code != 128 + r.signal)
    return error{path, "exit_code",
                 "must be 128 + signal (" + std::to_string(128 + r.signal) +
                   ") for an agent ended by a signal"};
  if (auto* e = f.text("error"))
    r.error = *e;
  if (!r.started && r.error.empty())
    return error{path, "error", "an agent that never started needs a reason"};
  r.warnings = std::move(f.warnings_);
  return r;
}

std::string write_file_atomically(const std::string& path,
                                  std::string_view content) {
  auto tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                  private_file_mode);
  if (fd < 0)
    return tmp + ": cannot create: " + std::strerror(errno);
  while (!content.empty()) {
    auto n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return tmp + ": cannot write: " + std::strerror(err);
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return path + ": cannot rename into place: " + std::strerror(err);
  }
  return {};
}

expected<std::string> read_small_file(const std::string& path,
                                      std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT)
      return error{path, "missing", "does not exist"};
    return error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  }
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      auto err = errno;
      ::close(fd);
      return error{path, "", std::string{"cannot read: "} + std::strerror(err)};
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return error{path, "",
                   "longer than " + std::to_string(max_bytes) + " bytes"};
    }
  }
  ::close(fd);
  return out;
}

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  std::string buf;
  auto fields = stat_fields(pid, buf);
  // Field 22 is fields[19].
  if (!fields || fields->size() < 20)
    return std::nullopt;
  return parse_number((*fields)[19], UINT64_MAX);
}

std::optional<pid_t> process_group_of(pid_t pid) {
  std::string buf;
  auto fields = stat_fields(pid, buf);
  // Field 5 is fields[2].
  if (!fields || fields->size() < 3)
    return std::nullopt;
  auto v = parse_number((*fields)[2], max_pid);
  if (!v)
    return std::nullopt;
  return static_cast<pid_t>(*v);
}

bool is_shim_of(pid_t pid, std::uint64_t start,
                const std::string& attempt_dir) {
  if (pid <= 1)
    return false;
  auto before = process_start_time(pid);
  if (!before || *before != start)
    return false;
  auto cmdline =
    read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 1 << 20);
  if (!cmdline)
    return false;
  std::vector<std::string_view> args;
  std::string_view rest{*cmdline};
  while (!rest.empty()) {
    auto nul = rest.find('\0');
    args.push_back(rest.substr(0, nul));
    if (nul == std::string_view::npos)
      break;
    rest.remove_prefix(nul + 1);
  }
  if (args.empty())
    return false;
  auto prog = args[0];
  if (auto slash = prog.rfind('/'); slash != std::string_view::npos)
    prog.remove_prefix(slash + 1);
  if (prog != shim_program)
    return false;
  // A serving shim runs the attempts of one task, whose directories are
  // in the one it names.
  auto parent = attempt_dir.substr(0, attempt_dir.rfind('/'));
  bool dir_matches = false;
  for (std::size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] == "--")
      break;
    if (args[i] == "--attempt-dir")
      dir_matches = args[i + 1] == attempt_dir;
    else if (args[i] == "--serve")
      dir_matches = !parent.empty() && args[i + 1] == parent;
  }
  if (!dir_matches)
    return false;
  // Read again: the pid must not have been reused while we looked.
  auto after = process_start_time(pid);
  return after && *after == start;
}

bool environment_has(pid_t pid, std::string_view entry) {
  auto env =
    read_small_file("/proc/" + std::to_string(pid) + "/environ", 1 << 22);
  if (!env)
    return false;
  std::string_view rest{*env};
  while (!rest.empty()) {
    auto nul = rest.find('\0');
    if (rest.substr(0, nul) == entry)
      return true;
    if (nul == std::string_view::npos)
      break;
    rest.remove_prefix(nul + 1);
  }
  return false;
}

std::size_t kill_group_members(pid_t pgid, std::uint64_t not_before,
                               const std::string& attempt_dir) {
  if (pgid <= 1)
    return 0;
  std::vector<pid_t> members;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr)
    return 0;
  while (auto* ent = ::readdir(proc)) {
    auto pid = parse_number(ent->d_name, max_pid);
    if (!pid || *pid <= 1)
      continue;
    auto p = static_cast<pid_t>(*pid);
    auto group = process_group_of(p);
    auto start = process_start_time(p);
    if (!group || *group != pgid || !start || *start < not_before)
      continue;
    members.push_back(p);
  }
  ::closedir(proc);
  auto marker = "TASKSUP_ARTIFACTS_DIR=" + attempt_dir + "/artifacts";
  bool ours = std::any_of(members.begin(), members.end(),
                          [&](pid_t p) { return environment_has(p, marker); });
  if (!ours)
    return 0;
  std::size_t n = 0;
  for (auto p : members)
    if (::kill(p, SIGKILL) == 0)
      ++n;
  return n;
}

constexpr std::string_view request_header = "tasksup-shim-request 1";

std::string encode_shim_request(const shim_request& r) {
  std::string out{request_header};
  out += '\0';
  auto put = [&](std::string_view key, std::string_view value) {
    out += key;
    out += '\0';
    out += value;
    out += '\0';
  };
  put("attempt-dir", r.attempt_dir);
  put("log-bytes", std::to_string(r.log_bytes));
  put("drain-ms", std::to_string(r.drain_ms));
  put("group-ms", std::to_string(r.group_ms));
  put("cgroup", r.cgroup);
  put("cwd", r.cwd);
  for (auto& a : r.argv)
    put("arg", a);
  for (auto& e : r.env)
    put("env", e);
  return out;
}

expected<shim_request> parse_shim_request(std::string_view payload) {
  auto bad = [](std::string what) {
    return error{"shim request", "", std::move(what)};
  };
  if (payload.size() > max_request_bytes)
    return bad("larger than " + std::to_string(max_request_bytes) + " bytes");
  std::vector<std::string_view> parts;
  while (!payload.empty()) {
    auto nul = payload.find('\0');
    if (nul == std::string_view::npos)
      return bad("not NUL-terminated");
    parts.push_back(payload.substr(0, nul));
    payload.remove_prefix(nul + 1);
  }
  if (parts.empty() || parts.front() != request_header)
    return bad("unknown header");
  if (parts.size() % 2 != 1)
    return bad("a key without a value");
  // The fields in the order encode_shim_request writes them, then the
  // command's arguments and the environment, repeated.
  std::size_t at = 1;
  std::optional<error> problem;
  auto field = [&](std::string_view key) -> std::string_view {
    if (problem)
      return {};
    if (at >= parts.size() || parts[at] != key) {
      problem = bad("field '" + std::string{key} + "' is missing");
      return {};
    }
    at += 2;
    return parts[at - 1];
  };
  auto number = [&](std::string_view key) -> std::uint64_t {
    auto v = field(key);
    if (problem)
      return 0;
    auto n = parse_number(v, std::uint64_t{1} << 50);
    if (!n)
      problem = bad(std::string{key} + ": not a number");
    return n.value_or(0);
  };
  shim_request r;
  r.attempt_dir = field("attempt-dir");
  r.log_bytes = number("log-bytes");
  r.drain_ms = number("drain-ms");
  r.group_ms = number("group-ms");
  r.cgroup = field("cgroup");
  r.cwd = field("cwd");
  if (problem)
    return *problem;
  for (; at < parts.size(); at += 2) {
    auto k = parts[at];
    auto v = parts[at + 1];
    if (k == "arg") {
      r.argv.emplace_back(v);
    } else if (k == "env") {
      if (v.find('=') == std::string_view::npos || v.front() == '=')
        return bad("env: not NAME=value");
      r.env.emplace_back(v);
    } else {
      return bad("unknown key '" + one_line(k) + "'");
    }
  }
  if (r.attempt_dir.empty() || r.attempt_dir.front() != '/')
    return bad("attempt-dir: not an absolute directory");
  if (r.cwd.empty() || r.cwd.front() != '/')
    return bad("cwd: not an absolute directory");
  if (!r.cgroup.empty() && r.cgroup.front() != '/')
    return bad("cgroup: not an absolute directory");
  if (r.argv.empty() || r.argv.front().empty())
    return bad("no command");
  return r;
}

bool send_with_fds(int sock, std::string_view bytes, int out, int err,
                   std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n;
    if (sent == 0) {
      iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      auto* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * 2);
      int fds[2] = {out, err};
      std::memcpy(CMSG_DATA(c), fds, sizeof fds);
      n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      n = ::send(sock, bytes.data() + sent, bytes.size() - sent,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    pollfd p{sock, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0)
      return false;
  }
  return true;
}

bool send_shim_request(int sock, std::string_view payload, int out, int err,
                       std::chrono::milliseconds timeout) {
  if (payload.size() > max_request_bytes)
    return false;
  std::string frame(4, '\0');
  auto size = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i)
    frame[static_cast<std::size_t>(i)] = static_cast<char>(size >> (8 * i));
  frame += payload;
  return send_with_fds(sock, frame, out, err, timeout);
}

std::string encode_attempt_end(std::string_view exit_record_text) {
  std::string out = "end " + std::to_string(exit_record_text.size()) + "\n";
  out += exit_record_text;
  return out;
}

expected<std::optional<std::string_view>>
parse_attempt_end(std::string_view bytes) {
  auto bad = [](std::string what) {
    return error{"shim", "end", std::move(what)};
  };
  constexpr std::string_view word = "end ";
  // The length has at most five digits (a record is at most 8 KiB).
  constexpr std::size_t max_head = word.size() + 5 + 1;
  if (bytes.substr(0, word.size()) != word.substr(0, bytes.size()))
    return bad("expected 'end', got '" + one_line(bytes.substr(0, 16)) + "'");
  auto nl = bytes.find('\n');
  if (nl == std::string_view::npos) {
    if (bytes.size() >= max_head)
      return bad("length not ended by a newline");
    return std::optional<std::string_view>{};
  }
  auto size =
    parse_number(bytes.substr(word.size(), nl - word.size()), max_record_bytes);
  if (!size)
    return bad("malformed length '" + one_line(bytes.substr(0, nl)) + "'");
  auto rest = bytes.substr(nl + 1);
  if (rest.size() < *size)
    return std::optional<std::string_view>{};
  if (rest.size() > *size)
    return bad("bytes after the exit record");
  return std::optional<std::string_view>{rest};
}

expected<std::vector<log_segment>>
stream_index_reader::feed(std::string_view bytes, const std::string& path) {
  std::vector<log_segment> out;
  partial_.append(bytes.data(), bytes.size());
  std::string_view rest{partial_};
  std::size_t used = 0;
  while (true) {
    auto nl = rest.find('\n');
    if (nl == std::string_view::npos)
      break;
    auto line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    used += nl + 1;
    if (line.size() < 3 || line[1] != ' ' ||
        (line[0] != 'o' && line[0] != 'e' && line[0] != 'n'))
      return error{path, "",
                   "malformed stream index line '" +
                     one_line(line.substr(0, 64)) + "'"};
    auto n = parse_number(line.substr(2), std::uint64_t{1} << 40);
    if (!n)
      return error{path, "",
                   "malformed byte count in stream index line '" +
                     one_line(line.substr(0, 64)) + "'"};
    out.push_back(log_segment{line[0], *n});
  }
  if (partial_.size() - used > 64)
    return error{path, "", "stream index line longer than 64 bytes"};
  partial_.erase(0, used);
  return out;
}

} // namespace tasksup::runtime::detail
