#include "tasksup/supervisor/answer.hpp"

#include "text_scan.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace tasksup {

namespace {

/// `line` without the blanks around it.
std::string_view trimmed(std::string_view line) {
  constexpr std::string_view blanks = " \t\r";
  auto first = line.find_first_not_of(blanks);
  if (first == std::string_view::npos)
    return {};
  auto last = line.find_last_not_of(blanks);
  return line.substr(first, last - first + 1);
}

/// Whether `line` opens a fenced JSON block: "```json", any case.
bool opens_block(std::string_view line) {
  auto t = trimmed(line);
  auto end = detail::match_word(t, 0, "```json");
  return end == t.size();
}

} // namespace

void answer_scanner::feed(std::string_view line) {
  if (opens_block(line)) {
    // A block that never closed is dropped: the new one starts over.
    open_ = true;
    too_big_ = false;
    current_.clear();
    return;
  }
  if (!open_)
    return;
  if (trimmed(line) == "```") {
    open_ = false;
    if (!too_big_)
      last_ = std::move(current_);
    current_.clear();
    return;
  }
  if (too_big_)
    return;
  if (current_.size() + line.size() + 1 > max_answer_bytes) {
    too_big_ = true;
    current_.clear();
    current_.shrink_to_fit();
    return;
  }
  current_.append(line);
  current_.push_back('\n');
}

std::optional<std::string> answer_in_message(std::string_view text) {
  auto t = trimmed(text);
  while (!t.empty() && (t.front() == '\n' || t.back() == '\n'))
    t = trimmed(t.front() == '\n' ? t.substr(1) : t.substr(0, t.size() - 1));
  if (!t.empty() && (t.front() == '{' || t.front() == '[') &&
      t.size() <= max_answer_bytes) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(t, ec);
    if (!ec)
      return std::string{t};
  }
  answer_scanner scan;
  std::size_t at = 0;
  while (at <= text.size()) {
    auto end = text.find('\n', at);
    if (end == std::string_view::npos)
      end = text.size();
    scan.feed(text.substr(at, end - at));
    at = end + 1;
  }
  return scan.last();
}

std::optional<std::string> answer_field(std::string_view answer,
                                        std::string_view field) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(answer, ec);
  if (ec || !doc.is_object())
    return std::nullopt;
  const auto* x = doc.get_object().if_contains(field);
  if (x == nullptr)
    return std::nullopt;
  if (x->is_string())
    return std::string{x->get_string()};
  return boost::json::serialize(*x);
}

} // namespace tasksup
