#pragma once

// The tasks `tasksup submit` sends, read in order from its command line:
// task files, and JSON lines from stdin for `-`. Shared by the command's
// two paths (the node's TCP port, its local control socket).

#include "task_input.hpp"

#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include <boost/json/serialize.hpp>

#include <cstddef>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::app {

/// One task ready to send: where it came from (for messages) and its text.
struct task_text {
  std::string where;
  std::string text;
};

/// Yields the tasks of the command line in order: each file, and for `-`
/// each non-blank line of stdin (JSON lines). Unreadable inputs are
/// reported on stderr as they are met and counted in `failed`.
class task_source {
public:
  explicit task_source(std::vector<std::string> files)
    : files_(std::move(files)) {}

  /// The next task, or nullopt when the inputs are exhausted.
  std::optional<task_text> next() {
    for (;;) {
      if (reading_stdin_) {
        if (auto x = next_line())
          return x;
        reading_stdin_ = false;
      }
      if (index_ >= files_.size())
        return std::nullopt;
      auto& file = files_[index_++];
      if (file == "-") {
        reading_stdin_ = true;
        line_ = 0;
        continue;
      }
      auto input = read_task_input(file);
      if (!input) {
        fail(input.error().to_string());
        continue;
      }
      if (auto x = checked(file, std::move(input->text)))
        return x;
    }
  }

  /// Inputs that could not be read or were too large.
  std::size_t failed = 0;

private:
  void fail(const std::string& text) {
    std::cerr << "tasksup submit: " << text << '\n';
    ++failed;
  }

  std::optional<task_text> checked(std::string where, std::string text) {
    if (text.size() > wire::max_task_json_bytes) {
      fail(where + ": the task is " + std::to_string(text.size()) +
           " bytes; a node accepts at most " +
           std::to_string(wire::max_task_json_bytes));
      return std::nullopt;
    }
    return task_text{std::move(where), std::move(text)};
  }

  /// Reads stdin up to the next newline, keeping at most one byte past the
  /// limit so a huge line costs no memory.
  bool read_line(std::string& out) {
    out.clear();
    auto* buf = std::cin.rdbuf();
    bool any = false;
    for (;;) {
      auto c = buf->sbumpc();
      if (c == std::char_traits<char>::eof())
        return any;
      any = true;
      if (c == '\n')
        return true;
      if (out.size() <= wire::max_task_json_bytes)
        out.push_back(static_cast<char>(c));
    }
  }

  std::optional<task_text> next_line() {
    std::string line;
    while (read_line(line)) {
      ++line_;
      if (line.find_first_not_of(" \t\r") == std::string::npos)
        continue;
      auto where = "<stdin>:" + std::to_string(line_);
      if (line.size() > wire::max_task_json_bytes) {
        fail(where + ": the line is longer than " +
             std::to_string(wire::max_task_json_bytes) + " bytes");
        continue;
      }
      auto doc = parse_json_text(line, where);
      if (!doc) {
        fail(doc.error().to_string());
        continue;
      }
      // Relative agent paths are taken relative to the working directory.
      std::error_code ec;
      resolve_agent_paths(*doc, std::filesystem::current_path(ec).string());
      if (auto x = checked(where, boost::json::serialize(*doc)))
        return x;
    }
    return std::nullopt;
  }

  std::vector<std::string> files_;
  std::size_t index_ = 0;
  bool reading_stdin_ = false;
  std::size_t line_ = 0;
};

} // namespace tasksup::app
