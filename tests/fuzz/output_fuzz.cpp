// libFuzzer harness for the profile output parsers (claude-stream-json,
// codex-jsonl, gemini-json) with numbers at the edges: agent output is
// untrusted, and a number in it reaches the task's sums, the journal and the
// wire. The first byte picks the format; in the rest, a byte 0x01 followed by
// a byte is replaced by one of the edge numbers below, so the fuzzer can put
// them where the parsers read numbers. Every attempt's figures, and their
// sum over two attempts as a task adds them up, must stay bounded.

#include "tasksup/supervisor/agent_output.hpp"
#include "tasksup/supervisor/bounded_number.hpp"
#include "tasksup/supervisor/output_parser.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

using namespace tasksup;

namespace {

void require(bool condition) {
  if (!condition)
    std::abort();
}

constexpr std::array<std::string_view, 24> edge_numbers{{
  "1e308",
  "-1e308",
  "1.7976931348623157e308",
  "1e309",
  "-1e309",
  "1e999999",
  "-1e999999",
  "NaN",
  "Infinity",
  "-0",
  "-0.0",
  "0",
  "4.9e-324",
  "1e-400",
  "9223372036854775807",
  "9223372036854775808",
  "-9223372036854775808",
  "-9223372036854775809",
  "18446744073709551615",
  "18446744073709551616",
  "9000000000000000000",
  "9e18",
  "1e15",
  "123456789012345678901234567890",
}};

/// `body` with each 0x01 and the byte after it replaced by an edge number.
std::string expand(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\x01' && i + 1 < body.size()) {
      auto pick = static_cast<unsigned char>(body[i + 1]);
      out += edge_numbers[pick % edge_numbers.size()];
      ++i;
    } else {
      out += body[i];
    }
  }
  return out;
}

void check_cost(const std::optional<double>& usd) {
  if (!usd)
    return;
  require(std::isfinite(*usd));
  require(*usd >= 0 && *usd <= max_cost_usd);
  require(!std::signbit(*usd));
}

void check_usage(const std::optional<token_usage>& u) {
  if (!u)
    return;
  require(u->input_tokens >= 0);
  require(u->output_tokens >= 0);
  require(u->cached_input_tokens >= 0);
}

void check(const structured_result& r) {
  check_cost(r.cost_usd);
  check_usage(r.usage);
  if (r.error && r.error->retry_after_s)
    require(std::isfinite(*r.error->retry_after_s) &&
            *r.error->retry_after_s >= 0 && *r.error->retry_after_s <= 86400);
  if (r.error)
    require(r.error->http_status == 0 ||
            (r.error->http_status >= 100 && r.error->http_status <= 599));
}

structured_result parse(output_format format, std::string_view text) {
  output_parser parser{format};
  std::size_t begin = 0;
  while (begin <= text.size()) {
    auto end = text.find('\n', begin);
    if (end == std::string_view::npos)
      end = text.size();
    parser.feed(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parser.result();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1)
    return 0;
  constexpr std::array<output_format, 3> formats{
    output_format::claude_stream_json, output_format::codex_jsonl,
    output_format::gemini_json};
  auto format = formats[data[0] % formats.size()];
  auto text = expand({reinterpret_cast<const char*>(data + 1), size - 1});
  auto once = parse(format, text);
  check(once);
  // Two attempts that report the same figures, summed as the task machine
  // sums them: the sums saturate and clamp, they never overflow.
  auto usage = once.usage.value_or(token_usage{});
  usage += once.usage.value_or(token_usage{});
  usage += once.usage.value_or(token_usage{});
  check_usage(usage);
  if (once.cost_usd)
    check_cost(
      add_cost(add_cost(*once.cost_usd, *once.cost_usd), *once.cost_usd));
  return 0;
}
