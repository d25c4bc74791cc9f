#pragma once

// A real nats-server with JetStream for the tests (Debian's nats-server,
// installed by scripts/bootstrap.sh), on loopback at a free port with its
// storage in a scratch directory, and a small client on the real C client
// (libnats) to publish submissions, read published events and look at a
// consumer.

#include "tasksup_child.hpp"

#include <nats/nats.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace tasksup::test {

/// Where Debian installs the server.
inline constexpr const char* nats_server_program = "/usr/sbin/nats-server";

/// A nats-server child: started in the constructor (waits until it wrote
/// its port), killed with the object.
class nats_server {
public:
  explicit nats_server(const scratch& dir) {
    auto ports = dir / "nats-ports";
    std::filesystem::create_directories(ports);
    child_ = std::make_unique<tasksup_child>(
      dir, "nats-server",
      std::vector<std::string>{"-js", "-a", "127.0.0.1", "-p", "-1", "-sd",
                               dir / "nats-store", "--ports_file_dir", ports},
      "/dev/null", std::vector<std::string>{}, nats_server_program);
    auto file =
      ports + "/nats-server_" + std::to_string(child_->pid()) + ".ports";
    const std::regex url{"\"(nats://127\\.0\\.0\\.1:[0-9]+)\""};
    eventually(
      [&] {
        std::smatch m;
        auto text = slurp(file);
        if (!std::regex_search(text, m, url))
          return false;
        url_ = m[1];
        return true;
      },
      std::chrono::seconds{20});
    if (url_.empty())
      throw std::runtime_error("nats-server did not start: " + child_->err());
  }

  /// nats://127.0.0.1:PORT
  const std::string& url() const { return url_; }

private:
  std::unique_ptr<tasksup_child> child_;
  std::string url_;
};

/// A client of the server: JetStream publishes, a core subscription that
/// collects what arrives on a subject, a consumer's figures.
class nats_client {
public:
  explicit nats_client(const std::string& url) {
    check(natsConnection_ConnectTo(&nc_, url.c_str()), "connect");
    check(natsConnection_JetStream(&js_, nc_, nullptr), "JetStream");
  }

  nats_client(const nats_client&) = delete;
  nats_client& operator=(const nats_client&) = delete;

  ~nats_client() {
    if (sub_ != nullptr)
      natsSubscription_Destroy(sub_);
    jsCtx_Destroy(js_);
    natsConnection_Destroy(nc_);
  }

  /// Publishes `data` on `subject` into its stream (waiting for the
  /// stream's ack) with the message id `msg_id` ("" for none); returns
  /// whether the stream took it as a duplicate.
  bool publish(const std::string& subject, const std::string& data,
               const std::string& msg_id = {}) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    if (!msg_id.empty())
      po.MsgId = msg_id.c_str();
    jsPubAck* ack = nullptr;
    jsErrCode jerr = jsErrCode{};
    check(js_Publish(&ack, js_, subject.c_str(), data.data(),
                     static_cast<int>(data.size()), &po, &jerr),
          "publish");
    bool duplicate = ack->Duplicate;
    jsPubAck_Destroy(ack);
    return duplicate;
  }

  /// Publishes without waiting for each ack; `flush` waits for them all.
  void publish_async(const std::string& subject, const std::string& data,
                     const std::string& msg_id) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msg_id.c_str();
    check(js_PublishAsync(js_, subject.c_str(), data.data(),
                          static_cast<int>(data.size()), &po),
          "publish async");
  }

  void flush() {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 60000;
    check(js_PublishAsyncComplete(js_, &po), "publish async complete");
  }

  /// From now on, keeps what arrives on `subject` (wildcards allowed).
  void collect(const std::string& subject) {
    check(natsConnection_Subscribe(
            &sub_, nc_, subject.c_str(),
            [](natsConnection*, natsSubscription*, natsMsg* m, void* self) {
              auto* c = static_cast<nats_client*>(self);
              std::lock_guard<std::mutex> guard{c->mx_};
              c->received_.push_back(
                {natsMsg_GetSubject(m),
                 std::string{natsMsg_GetData(m), static_cast<std::size_t>(
                                                   natsMsg_GetDataLength(m))}});
              natsMsg_Destroy(m);
            },
            this),
          "subscribe");
    check(natsConnection_Flush(nc_), "flush");
  }

  /// (subject, data) of every message collected so far.
  std::vector<std::pair<std::string, std::string>> received() const {
    std::lock_guard<std::mutex> guard{mx_};
    return received_;
  }

  /// The consumer's messages not yet delivered and delivered but not yet
  /// acked; nullopt when it cannot be read.
  std::optional<std::pair<std::uint64_t, std::int64_t>>
  consumer_pending(const std::string& stream, const std::string& consumer) {
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = jsErrCode{};
    if (js_GetConsumerInfo(&ci, js_, stream.c_str(), consumer.c_str(), nullptr,
                           &jerr) != NATS_OK)
      return std::nullopt;
    std::pair<std::uint64_t, std::int64_t> out{ci->NumPending,
                                               ci->NumAckPending};
    jsConsumerInfo_Destroy(ci);
    return out;
  }

private:
  static void check(natsStatus s, const char* what) {
    if (s != NATS_OK)
      throw std::runtime_error(std::string{"nats "} + what + ": " +
                               natsStatus_GetText(s));
  }

  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  natsSubscription* sub_ = nullptr;
  mutable std::mutex mx_;
  std::vector<std::pair<std::string, std::string>> received_;
};

} // namespace tasksup::test
