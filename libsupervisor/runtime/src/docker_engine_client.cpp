#include "docker_engine_client.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <optional>
#include <sys/un.h>
#include <utility>

namespace tasksup::runtime::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using unix_socket = asio::local::stream_protocol;

namespace {

class exchange_impl : public engine_exchange,
                      public std::enable_shared_from_this<exchange_impl> {
public:
  exchange_impl(asio::io_context& io, engine_endpoint ep, http::verb verb,
                std::string target, std::string body,
                std::chrono::milliseconds timeout, engine_open_handler on_open,
                engine_data_handler on_data, engine_response_handler done)
    : stream_(io), ep_(std::move(ep)), timeout_(timeout),
      streaming_(static_cast<bool>(on_data)), on_open_(std::move(on_open)),
      on_data_(std::move(on_data)), done_(std::move(done)) {
    request_.method(verb);
    request_.target(ep_.path_prefix + target);
    request_.version(11);
    request_.set(http::field::host, "docker");
    request_.set(http::field::user_agent, "tasksup");
    if (!body.empty()) {
      request_.set(http::field::content_type, "application/json");
      request_.body() = std::move(body);
    }
    if (streaming_) {
      request_.set(http::field::connection, "Upgrade");
      request_.set(http::field::upgrade, "tcp");
    }
    request_.prepare_payload();
  }

  void run() {
    sockaddr_un probe{};
    if (ep_.socket_path.empty() ||
        ep_.socket_path.size() >= sizeof(probe.sun_path)) {
      // Reported asynchronously like every other outcome.
      asio::post(stream_.get_executor(), [self = shared_from_this()] {
        self->fail("invalid Docker engine socket path '" +
                   self->ep_.socket_path + "'");
      });
      return;
    }
    if (timeout_.count() > 0)
      stream_.expires_after(timeout_);
    else
      stream_.expires_never();
    stream_.async_connect(unix_socket::endpoint{ep_.socket_path},
                          [self = shared_from_this()](beast::error_code ec) {
                            self->on_connect(ec);
                          });
  }

  void cancel() override {
    if (finished_)
      return;
    finished_ = true;
    done_ = nullptr;
    on_open_ = nullptr;
    on_data_ = nullptr;
    stream_.close();
  }

  void pause() override { paused_ = true; }

  void resume() override {
    paused_ = false;
    if (waiting_ && !finished_) {
      waiting_ = false;
      read_raw();
    }
  }

private:
  void on_connect(beast::error_code ec) {
    if (finished_)
      return;
    if (ec) {
      fail("cannot connect to the Docker engine at " + ep_.socket_path + ": " +
           describe(ec));
      return;
    }
    http::async_write(
      stream_, request_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->on_write(ec);
      });
  }

  void on_write(beast::error_code ec) {
    if (finished_)
      return;
    if (ec) {
      fail("sending to the Docker engine failed: " + describe(ec));
      return;
    }
    if (!streaming_) {
      whole_.emplace();
      whole_->body_limit(ep_.max_body_bytes);
      http::async_read(
        stream_, buffer_, *whole_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_whole(ec);
        });
      return;
    }
    parts_.emplace();
    parts_->body_limit(boost::none);
    http::async_read_header(
      stream_, buffer_, *parts_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->on_stream_header(ec);
      });
  }

  void on_whole(beast::error_code ec) {
    if (finished_)
      return;
    if (ec) {
      fail("reading the Docker engine's answer failed: " + describe(ec));
      return;
    }
    engine_response resp;
    resp.status = whole_->get().result_int();
    resp.body = std::move(whole_->get().body());
    finish(std::move(resp));
  }

  void on_stream_header(beast::error_code ec) {
    if (finished_)
      return;
    if (ec) {
      fail("reading the Docker engine's answer failed: " + describe(ec));
      return;
    }
    status_ = parts_->get().result_int();
    if (status_ != 101 && status_ != 200) {
      read_refusal();
      return;
    }
    // The connection now carries the raw stream; bytes read past the
    // header are its beginning.
    if (on_open_) {
      auto on_open = std::move(on_open_);
      on_open();
      if (finished_)
        return;
    }
    if (buffer_.size() > 0) {
      auto data = buffer_.data();
      std::string_view bytes{static_cast<const char*>(data.data()),
                             data.size()};
      on_data_(bytes);
      if (finished_)
        return;
      buffer_.consume(buffer_.size());
    }
    next_raw();
  }

  // Reads on, unless the receiver asked for a pause.
  void next_raw() {
    if (paused_)
      waiting_ = true;
    else
      read_raw();
  }

  void read_raw() {
    stream_.async_read_some(
      asio::buffer(chunk_),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->on_raw(ec, n);
      });
  }

  void on_raw(beast::error_code ec, std::size_t n) {
    if (finished_)
      return;
    if (n > 0) {
      on_data_(std::string_view{chunk_.data(), n});
      // on_data may have cancelled this exchange.
      if (finished_)
        return;
    }
    if (ec == asio::error::eof) {
      engine_response resp;
      resp.status = status_;
      finish(std::move(resp));
      return;
    }
    if (ec) {
      fail("the Docker engine's stream broke: " + describe(ec));
      return;
    }
    next_raw();
  }

  // Reads the body of a refused attach, bounded, for its message.
  void read_refusal() {
    if (parts_->is_done()) {
      engine_response resp;
      resp.status = status_;
      resp.body = std::move(error_body_);
      finish(std::move(resp));
      return;
    }
    parts_->get().body().data = chunk_.data();
    parts_->get().body().size = chunk_.size();
    http::async_read_some(
      stream_, buffer_, *parts_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->on_refusal_part(ec);
      });
  }

  void on_refusal_part(beast::error_code ec) {
    if (finished_)
      return;
    if (ec && ec != http::error::need_buffer) {
      fail("reading the Docker engine's answer failed: " + describe(ec));
      return;
    }
    auto n = chunk_.size() - parts_->get().body().size;
    if (error_body_.size() + n > ep_.max_body_bytes) {
      fail("the Docker engine's error answer exceeds " +
           std::to_string(ep_.max_body_bytes) + " bytes");
      return;
    }
    error_body_.append(chunk_.data(), n);
    read_refusal();
  }

  std::string describe(beast::error_code ec) const {
    if (ec == beast::error::timeout)
      return "no answer within " + std::to_string(timeout_.count()) + " ms";
    if (ec == http::error::body_limit)
      return "answer larger than " + std::to_string(ep_.max_body_bytes) +
             " bytes";
    return ec.message();
  }

  void fail(std::string text) {
    engine_response resp;
    resp.transport_error = std::move(text);
    finish(std::move(resp));
  }

  void finish(engine_response resp) {
    if (finished_)
      return;
    finished_ = true;
    stream_.close();
    auto done = std::move(done_);
    on_open_ = nullptr;
    on_data_ = nullptr;
    if (done)
      done(std::move(resp));
  }

  beast::basic_stream<unix_socket> stream_;
  engine_endpoint ep_;
  std::chrono::milliseconds timeout_;
  bool streaming_;
  engine_open_handler on_open_;
  engine_data_handler on_data_;
  engine_response_handler done_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> whole_;
  std::optional<http::response_parser<http::buffer_body>> parts_;
  std::array<char, 16 * 1024> chunk_{};
  unsigned status_ = 0;
  std::string error_body_;
  bool finished_ = false;
  /// Stream reading paused by the receiver; a read is owed once it ends.
  bool paused_ = false;
  bool waiting_ = false;
};

} // namespace

std::shared_ptr<engine_exchange>
async_engine_request(asio::io_context& io, const engine_endpoint& ep,
                     http::verb verb, std::string target, std::string body,
                     std::chrono::milliseconds timeout,
                     engine_response_handler done) {
  auto ex = std::make_shared<exchange_impl>(io, ep, verb, std::move(target),
                                            std::move(body), timeout, nullptr,
                                            nullptr, std::move(done));
  ex->run();
  return ex;
}

std::shared_ptr<engine_exchange>
async_engine_attach(asio::io_context& io, const engine_endpoint& ep,
                    std::string target, engine_open_handler on_open,
                    engine_data_handler on_data, engine_response_handler done) {
  auto ex = std::make_shared<exchange_impl>(
    io, ep, http::verb::post, std::move(target), std::string{},
    std::chrono::milliseconds{0}, std::move(on_open), std::move(on_data),
    std::move(done));
  ex->run();
  return ex;
}

} // namespace tasksup::runtime::detail
