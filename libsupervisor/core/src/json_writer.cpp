#include "tasksup/supervisor/json_writer.hpp"

#include "tasksup/supervisor/text.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

namespace tasksup {

std::size_t format_json_number(double x, char* out) {
  if (!std::isfinite(x)) {
    // JSON has no infinities or NaN.
    std::memcpy(out, "null", 4);
    return 4;
  }
  // The shortest digits that read back as `x`, in plain decimal notation:
  // a timestamp reads 1795362464.5893607, not 1.7953624645893607E9.
  auto r = std::to_chars(out, out + max_json_number_chars - 2, x,
                         std::chars_format::fixed);
  auto n = static_cast<std::size_t>(r.ptr - out);
  if (std::memchr(out, '.', n) == nullptr) {
    // Keep it a floating-point number for readers that tell them apart.
    out[n++] = '.';
    out[n++] = '0';
  }
  return n;
}

void append_json_number(std::string& out, double x) {
  char buf[max_json_number_chars];
  out.append(buf, format_json_number(x, buf));
}

void append_json_string(std::string& out, std::string_view s) {
  auto needs_escape = [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == '"' || c == '\\';
  };
  if (std::none_of(s.begin(), s.end(), needs_escape)) {
    out.reserve(out.size() + s.size() + 2);
    out += '"';
    out += s;
    out += '"';
    return;
  }
  json_writer w{std::move(out)};
  w.raw_string(s);
  out = w.release();
}

void json_writer::string(std::string_view s) {
  separator();
  if (plain(s))
    quoted(s);
  else if (valid_utf8(s))
    escaped(s);
  else
    escaped(sanitize_utf8(s));
}

void json_writer::value(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::double_:
      number(v.get_double());
      return;
    case boost::json::kind::object:
      begin_object();
      for (auto& kv : v.get_object()) {
        any_key(kv.key());
        value(kv.value());
      }
      end_object();
      return;
    case boost::json::kind::array:
      begin_array();
      for (auto& x : v.get_array())
        value(x);
      end_array();
      return;
    case boost::json::kind::string:
      raw_string(v.get_string());
      return;
    case boost::json::kind::int64:
      integer(v.get_int64());
      return;
    case boost::json::kind::uint64:
      unsigned_integer(v.get_uint64());
      return;
    case boost::json::kind::bool_:
      boolean(v.get_bool());
      return;
    case boost::json::kind::null:
      null();
      return;
  }
}

std::string json_writer::take() {
  auto used = static_cast<std::size_t>(p_ - out_.data());
  out_.resize(used);
  p_ = end_ = nullptr;
  // The event keeps this text while it travels: an escaped line reserved
  // six bytes per input byte, so give back what lies far beyond its size.
  if (out_.capacity() - used > 1024)
    out_.shrink_to_fit();
  return std::move(out_);
}

void json_writer::grow(std::size_t n) {
  auto used = p_ ? static_cast<std::size_t>(p_ - out_.data()) : 0;
  out_.resize(std::max(out_.size() * 2, used + n + 256));
  p_ = out_.data() + used;
  end_ = out_.data() + out_.size();
}

void json_writer::escaped(std::string_view s) {
  // Room for the text as it is; each escape makes room for its own bytes
  // (reserving six bytes per input byte ahead made most events grow their
  // buffer once more).
  reserve(s.size() + 2);
  *p_++ = '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') {
      *p_++ = s[i];
      continue;
    }
    // At most six bytes for this one, one for each after it, the quote.
    reserve(6 + (s.size() - i - 1) + 1);
    *p_++ = '\\';
    switch (c) {
      case '"':
        *p_++ = '"';
        break;
      case '\\':
        *p_++ = '\\';
        break;
      case '\b':
        *p_++ = 'b';
        break;
      case '\t':
        *p_++ = 't';
        break;
      case '\n':
        *p_++ = 'n';
        break;
      case '\f':
        *p_++ = 'f';
        break;
      case '\r':
        *p_++ = 'r';
        break;
      default:
        *p_++ = 'u';
        *p_++ = '0';
        *p_++ = '0';
        *p_++ = detail::hex_chars[c >> 4];
        *p_++ = detail::hex_chars[c & 15];
    }
  }
  *p_++ = '"';
}

} // namespace tasksup
