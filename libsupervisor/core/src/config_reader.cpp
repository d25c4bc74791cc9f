#include "config_reader.hpp"

#include <algorithm>

namespace tasksup::detail {

std::string quote(std::string_view str) {
  constexpr std::size_t max_shown = 80;
  std::string out = "\"";
  std::size_t shown = 0;
  for (unsigned char c : str) {
    if (shown++ == max_shown) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string shown_pointer(std::string_view path) {
  constexpr std::size_t max_component = 64;
  constexpr std::size_t max_total = 400;
  std::string out;
  std::size_t component = 0;
  for (unsigned char c : path) {
    if (c == '/') {
      component = 0;
      out += '/';
      continue;
    }
    ++component;
    if (component > max_component) {
      if (component == max_component + 1)
        out += "...";
      continue;
    }
    if (c < 0x20 || c >= 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() > max_total)
    out = out.substr(0, max_total / 2) + "..." +
          out.substr(out.size() - max_total / 2);
  return out;
}

std::string shown_message(std::string what) {
  constexpr std::size_t max_bytes = 1000;
  if (what.size() > max_bytes) {
    what.resize(max_bytes);
    what += "...";
  }
  return what;
}

void append_pointer_token(std::string& pointer, std::string_view key) {
  pointer += '/';
  for (char c : key) {
    if (c == '~')
      pointer += "~0";
    else if (c == '/')
      pointer += "~1";
    else
      pointer += c;
  }
}

std::string child(const std::string& path, std::string_view key) {
  std::string out = path;
  append_pointer_token(out, key);
  return out;
}

std::string child(const std::string& path, std::size_t index) {
  return path + '/' + std::to_string(index);
}

namespace {

bool is_id_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

} // namespace

bool valid_identifier(std::string_view str) noexcept {
  return !str.empty() && str.size() <= max_id_length && str != "." &&
         str != ".." && std::all_of(str.begin(), str.end(), is_id_char);
}

expected<std::vector<std::filesystem::path>>
json_files_in(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return files;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end;
       it.increment(ec))
    if (it->path().extension() == ".json")
      files.push_back(it->path());
  if (ec)
    return error{dir, "", "cannot list: " + ec.message()};
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace tasksup::detail
