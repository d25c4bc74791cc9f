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

/// A record that `decode` loads writes back (every number bounded, so
/// writing ends) to bytes that load to the same thing.
template<class Decode>
void round_trip(std::string_view bytes, Decode decode) {
  if (auto x = decode(bytes, "fuzz", nullptr)) {
    auto again = encode(*x);
    auto y = decode(again, "fuzz", nullptr);
    require(static_cast<bool>(y));
    require(encode(*y) == again);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  std::string_view bytes{reinterpret_cast<const char*>(data + 1), size - 1};
  switch (data[0] % 6) {
    case 0:
      round_trip(bytes, decode_input);
      break;
    case 1:
      round_trip(bytes, decode_task);
      break;
    case 3:
      round_trip(bytes, decode_group);
      break;
    case 4:
      round_trip(bytes, decode_group_input);
      break;
    case 5:
      round_trip(bytes, decode_group_end);
      break;
    default:
      round_trip(bytes, decode_status);
      break;
  }
  return 0;
}
