#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

/// `str` as valid UTF-8, for JSON output: valid sequences are kept, every
/// byte of an invalid one becomes the four characters `\xNN`. Linear time.
std::string utf8_or_escaped(std::string_view str);

/// `str` safe to print on a terminal: like `utf8_or_escaped`, and control
/// characters (C0 except tab, DEL, C1) also become `\xNN` (C1 characters
/// as their UTF-8 bytes), so output cannot move the cursor or change colours.
std::string printable(std::string_view str);

/// A table cell from remote data: control characters become `?`, an empty
/// text `-`.
std::string cell(std::string_view text);

/// Prints `rows` (the first is the header) in columns two spaces apart,
/// each as wide as its widest cell.
void print_columns(std::ostream& out,
                   const std::vector<std::vector<std::string>>& rows);

} // namespace tasksup::app
