#include "config_reader.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <optional>
#include <set>
#include <vector>

// Duplicate object keys. Boost.JSON (1.81) keeps the last of two equal keys
// and cannot report them, so `{"id": "../../etc", "id": "x1"}` would read as
// "x1". A SAX pass over the text finds the first duplicate and its JSON
// pointer; every document tasksup reads (config files, task files, JSON
// submits) goes through it.

namespace tasksup::detail {

namespace {

using boost::json::string_view;
using boost::system::error_code;

class key_checker {
public:
  static constexpr std::size_t max_array_size = -1;
  static constexpr std::size_t max_object_size = -1;
  static constexpr std::size_t max_string_size = -1;
  static constexpr std::size_t max_key_size = -1;

  /// The first duplicate key, once found.
  std::optional<duplicate_key> duplicate;

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }

  bool on_object_begin(error_code&) {
    open(true);
    return true;
  }

  bool on_object_end(std::size_t, error_code&) {
    close();
    return true;
  }

  bool on_array_begin(error_code&) {
    open(false);
    return true;
  }

  bool on_array_end(std::size_t, error_code&) {
    close();
    return true;
  }

  bool on_key_part(string_view s, std::size_t, error_code&) {
    key_.append(s.data(), s.size());
    return true;
  }

  bool on_key(string_view s, std::size_t, error_code& ec) {
    key_.append(s.data(), s.size());
    auto& top = frames_.back();
    if (!top.keys.insert(key_).second) {
      auto where = pointer();
      append_pointer_token(where, key_);
      duplicate = duplicate_key{std::move(where), key_};
      // Any error stops the parser; `duplicate` says which.
      ec = boost::json::error::extra_data;
      return false;
    }
    top.key = std::move(key_);
    key_.clear();
    return true;
  }

  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return scalar(); }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, string_view, error_code&) { return scalar(); }
  bool on_uint64(std::uint64_t, string_view, error_code&) { return scalar(); }
  bool on_double(double, string_view, error_code&) { return scalar(); }
  bool on_bool(bool, error_code&) { return scalar(); }
  bool on_null(error_code&) { return scalar(); }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

private:
  struct frame {
    bool object = false;
    std::set<std::string> keys;
    /// The key of the member being read (objects).
    std::string key;
    /// The index of the element being read (arrays).
    std::size_t index = 0;
  };

  /// The pointer of the container being read.
  std::string pointer() const {
    std::string out;
    // frames_[0] is the document root; each later frame is a member or
    // element of the one before it.
    for (std::size_t i = 1; i < frames_.size(); ++i) {
      const auto& parent = frames_[i - 1];
      if (parent.object)
        append_pointer_token(out, parent.key);
      else
        out += '/' + std::to_string(parent.index);
    }
    return out;
  }

  void open(bool object) {
    frame f;
    f.object = object;
    frames_.push_back(std::move(f));
  }

  void close() {
    frames_.pop_back();
    scalar();
  }

  /// A value ended: the next element of an array has the next index.
  bool scalar() {
    if (!frames_.empty() && !frames_.back().object)
      ++frames_.back().index;
    return true;
  }

  std::vector<frame> frames_;
  std::string key_;
};

} // namespace

std::optional<duplicate_key> find_duplicate_key(std::string_view text) {
  json::parse_options opts;
  opts.max_depth = max_json_depth;
  boost::json::basic_parser<key_checker> parser{opts};
  error_code ec;
  parser.write_some(false, text.data(), text.size(), ec);
  return std::move(parser.handler().duplicate);
}

} // namespace tasksup::detail
