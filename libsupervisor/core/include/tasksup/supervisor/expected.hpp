#pragma once

#include <string>
#include <utility>
#include <variant>

namespace tasksup {

/// A failure as a value: where it happened (a file name, or a label such as
/// "task" for in-memory input), the JSON path inside it (e.g.
/// `/agents/2/cli_flags`, empty when not applicable) and what was expected.
struct error {
  std::string where;
  std::string path;
  std::string what;

  /// "where: path: what", leaving out empty parts; the text users see.
  std::string to_string() const {
    std::string out;
    for (auto* part : {&where, &path}) {
      if (!part->empty()) {
        out += *part;
        out += ": ";
      }
    }
    out += what;
    return out;
  }
};

/// Either a value or an `error`; errors cross layers as values, never as
/// exceptions (STYLE.md 5).
template<class T>
class expected {
public:
  expected(T value) : data_(std::move(value)) {}

  expected(tasksup::error err) : data_(std::move(err)) {}

  explicit operator bool() const noexcept { return data_.index() == 0; }

  bool has_value() const noexcept { return data_.index() == 0; }

  T& value() & { return std::get<0>(data_); }

  const T& value() const& { return std::get<0>(data_); }

  T&& value() && { return std::get<0>(std::move(data_)); }

  T& operator*() & { return value(); }

  const T& operator*() const& { return value(); }

  T* operator->() { return &value(); }

  const T* operator->() const { return &value(); }

  const tasksup::error& error() const { return std::get<1>(data_); }

private:
  std::variant<T, tasksup::error> data_;
};

} // namespace tasksup
