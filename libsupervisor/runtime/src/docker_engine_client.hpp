#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tasksup::runtime::detail {

/// The answer to one engine request.
struct engine_response {
  /// HTTP status; 0 when no response arrived.
  unsigned status = 0;
  /// The body (for streams: only of a non-2xx answer), at most the limit.
  std::string body;
  /// Set when the exchange itself failed: connect, timeout, broken or
  /// oversized response. Then `status` and `body` mean nothing.
  std::string transport_error;

  /// True for a complete 2xx answer.
  bool ok() const noexcept {
    return transport_error.empty() && status >= 200 && status < 300;
  }
};

/// Where and how to talk to the engine.
struct engine_endpoint {
  /// The engine's unix socket.
  std::string socket_path;
  /// Prefix of every target, e.g. "/v1.41".
  std::string path_prefix;
  /// Largest response body accepted.
  std::size_t max_body_bytes = 4 * 1024 * 1024;
};

/// One exchange in flight; `cancel` drops it without calling its handler.
/// Everything runs on the io_context's thread.
class engine_exchange {
public:
  virtual ~engine_exchange() = default;

  /// Closes the connection; the completion handler will not be called.
  virtual void cancel() = 0;

  /// A stream stops reading after the current piece (the engine, then the
  /// container, block once the socket's buffers are full) until `resume`.
  virtual void pause() {}

  /// A paused stream reads again.
  virtual void resume() {}
};

/// Called once with the response of a request.
using engine_response_handler = std::function<void(engine_response)>;

/// Called with each piece of a streamed 2xx body.
using engine_data_handler = std::function<void(std::string_view bytes)>;

/// Sends `verb target` (JSON `body` when non-empty) on a fresh connection and
/// reads the whole answer, bounded by `timeout` (zero: unbounded, for
/// long-polls such as wait). `done` runs on the io_context's thread.
std::shared_ptr<engine_exchange>
async_engine_request(boost::asio::io_context& io, const engine_endpoint& ep,
                     boost::beast::http::verb verb, std::string target,
                     std::string body, std::chrono::milliseconds timeout,
                     engine_response_handler done);

/// Called once a stream is established.
using engine_open_handler = std::function<void()>;

/// Sends POST `target` asking to take over the connection (an attach) and,
/// once the engine agrees (101 or 200), calls `on_open` and then passes every
/// byte of the raw stream to `on_data` until the engine closes it, without
/// bound on length or duration. `done` runs once at the end: status 101/200
/// after a clean end, the body of a refusal, or the transport error.
std::shared_ptr<engine_exchange>
async_engine_attach(boost::asio::io_context& io, const engine_endpoint& ep,
                    std::string target, engine_open_handler on_open,
                    engine_data_handler on_data, engine_response_handler done);

} // namespace tasksup::runtime::detail
