#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tasksup {

/// What `scan_utf8` found at one position.
struct utf8_scan {
  /// The length the sequence led by the byte must have (2 to 4), or 0 when
  /// that byte cannot lead a sequence.
  std::size_t len = 0;
  /// How many bytes from the lead on are valid (== `len` for a complete,
  /// valid sequence; less marks a maximal invalid subpart).
  std::size_t valid = 0;
};

/// Scans the UTF-8 sequence led by `s[i]` (a byte >= 0x80) per RFC 3629: no
/// overlong forms, no surrogates, nothing above U+10FFFF. The one UTF-8
/// decoder of tasksup: the validator, the event writer and the console use
/// it.
utf8_scan scan_utf8(std::string_view s, std::size_t i) noexcept;

/// The length of the valid UTF-8 sequence starting at `s[i]` (1 for ASCII),
/// or 0 when the bytes there do not form one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept;

/// True when every character of `s` is 0-9 or a-f (true when `s` is empty):
/// trace and span ids, container ids, tokens.
bool lower_hex(std::string_view s) noexcept;

/// True when `s` is valid UTF-8.
bool valid_utf8(std::string_view s) noexcept;

/// The offset of the first byte of `s` that is not part of a valid UTF-8
/// sequence, or `std::string_view::npos` when `s` is valid.
std::size_t first_invalid_utf8(std::string_view s) noexcept;

/// `s` with every invalid UTF-8 sequence replaced by U+FFFD (each maximal
/// invalid subpart by one).
std::string sanitize_utf8(std::string_view s);

} // namespace tasksup
