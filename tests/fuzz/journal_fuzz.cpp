// libFuzzer harness for the journal's records: the first input byte picks
// what is decoded (a machine input, a task, a task's status, a group's row,
// a group's input, a group's end), the rest is read as a restarted node
// reads its journal. A damaged record must be an error, never a crash; a
// record that loads must encode to bytes that load to the same thing (a
// resumed task journals inputs again; every number is read and written
// bounded).

#include "tasksup/actors/journal_codec.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace tasksup;

namespace {

void require(bool condition) {
  if (!condition)
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  std::string_view bytes{reinterpret_cast<const char*>(data + 1), size - 1};
  switch (data[0] % 6) {
    case 0:
      if (auto x = decode_input(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_input(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
    case 1:
      // A task or a result that loads writes back (every number bounded, so
      // writing ends) to bytes that load to the same thing.
      if (auto x = decode_task(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_task(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
    case 3:
      // A group's row, its inputs and its end, likewise.
      if (auto x = decode_group(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_group(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
    case 4:
      if (auto x = decode_group_input(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_group_input(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
    case 5:
      if (auto x = decode_group_end(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_group_end(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
    default:
      if (auto x = decode_status(bytes, "fuzz")) {
        auto again = encode(*x);
        auto y = decode_status(again, "fuzz");
        require(static_cast<bool>(y));
        require(encode(*y) == again);
      }
      break;
  }
  return 0;
}
