#include "nats_bridge.hpp"

#include "nats_messages.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/event_based_actor.hpp>

#include <boost/json/parse.hpp>

#include <nats/nats.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>

namespace tasksup::app {

namespace {

/// How long the node may take to journal a submission.
constexpr auto submit_timeout = std::chrono::seconds{30};

/// How long one fetch waits for messages (the intake notices an end of
/// intake within this).
constexpr std::int64_t fetch_wait_ms = 500;

/// The least time between two log lines about the same kind of failure.
constexpr auto repeat_gap = std::chrono::seconds{30};

std::int64_t to_ns(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

/// A NATS status with the library's last error on this thread.
std::string status_text(natsStatus s, jsErrCode js_error = jsErrCode{}) {
  std::string out = natsStatus_GetText(s);
  if (js_error != 0)
    out += " (JetStream error " + std::to_string(js_error) + ")";
  if (const char* last = nats_GetLastError(nullptr); last && *last) {
    out += ": ";
    out += last;
  }
  return out;
}

/// The message's `Nats-Msg-Id`, or "".
std::string msg_id_of(natsMsg* m) {
  const char* v = nullptr;
  if (natsMsgHeader_Get(m, "Nats-Msg-Id", &v) == NATS_OK && v != nullptr)
    return v;
  return {};
}

/// The message's sequence number in its stream (0 when it has none), read
/// from its ack subject.
std::uint64_t stream_seq_of(natsMsg* m) {
  const char* reply = natsMsg_GetReply(m);
  return reply == nullptr ? 0 : stream_seq_of_reply(reply);
}

/// A `group` event's `change` ("started", "ended", ...); "" for another
/// kind. Read from its typed keys, or its JSON when it came back as JSON.
std::string group_change(const event& ev) {
  if (ev.kind != event_kind::group)
    return {};
  if (auto* f = ev.fields()) {
    auto* g = std::get_if<event_data::group>(&f->data);
    return g != nullptr ? g->change : std::string{};
  }
  boost::system::error_code ec;
  auto doc = boost::json::parse(ev.json(), ec);
  if (ec || !doc.is_object())
    return {};
  auto* change = doc.get_object().if_contains("change");
  return change && change->is_string() ? std::string{change->get_string()}
                                       : std::string{};
}

/// Sends every submission to the door at once (the journal commits them
/// together); the answers, once all are in: none for a task journaled.
std::future<std::vector<caf::error>>
submit_all(caf::actor_system& sys, const node_door_actor& door,
           std::vector<std::string> tasks) {
  auto done = std::make_shared<std::promise<std::vector<caf::error>>>();
  auto answers = done->get_future();
  if (tasks.empty()) {
    done->set_value({});
    return answers;
  }
  sys.spawn([door, tasks = std::move(tasks),
             done](caf::event_based_actor* self) mutable {
    struct collected {
      std::vector<caf::error> errors;
      std::size_t left;
    };
    auto c = std::make_shared<collected>(
      collected{std::vector<caf::error>(tasks.size()), tasks.size()});
    auto finish = [c, done] {
      if (--c->left == 0)
        done->set_value(std::move(c->errors));
    };
    for (std::size_t i = 0; i < tasks.size(); ++i)
      self
        ->request(door, submit_timeout, submit_json_atom::value,
                  std::move(tasks[i]))
        .then([finish](std::string&) { finish(); },
              [c, i, finish](caf::error& err) {
                c->errors[i] = std::move(err);
                finish();
              });
  });
  return answers;
}

/// Batches submitted and not yet answered at most: the journal commits the
/// next while the node answers the last.
constexpr std::size_t max_batches_in_flight = 4;

/// A fetched batch on its way: its messages, the ones submitted with their
/// task ids, and the node's answers to come.
struct batch_in_flight {
  /// The fetched messages (owned: destroyed once answered).
  std::vector<natsMsg*> msgs;
  std::vector<natsMsg*> sent;
  std::vector<std::string> ids;
  std::future<std::vector<caf::error>> answers;
};

} // namespace

struct nats_bridge::impl {
  nats_options opts;
  caf::actor_system* sys = nullptr;
  node_door_actor door;
  nats_log log;
  natsOptions* nopts = nullptr;
  /// The intake's connection (JetStream: the stream, fetches, acks).
  natsConnection* nc = nullptr;
  /// The events' connection: a slow or busy publisher never delays an ack,
  /// and the two threads share no connection.
  natsConnection* events_nc = nullptr;
  jsCtx* js = nullptr;
  /// The inbox the consumer's messages come to, and its subscription.
  natsInbox* inbox = nullptr;
  natsSubscription* sub = nullptr;
  /// Where a pull request goes: $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>.
  std::string next_subject;
  std::thread intake;

  mutable std::mutex mx;
  std::condition_variable wake;
  /// Tasks and groups not yet ended (the backlog).
  std::unordered_set<std::string> unfinished;
  /// The last ids that ended, oldest first: a submission answered after
  /// its task already ended (a quick one) is not counted.
  std::unordered_set<std::string> recently_ended;
  std::deque<std::string> ended_order;
  bool began = false;
  bool ending = false;
  /// Messages submitted whose answers are not in yet (room they take).
  std::size_t in_flight = 0;

  /// Published events' ids: a random prefix per run and a counter.
  std::string id_prefix;
  std::uint64_t published = 0;
  std::chrono::steady_clock::time_point last_publish_warning{};

  ~impl() {
    {
      std::lock_guard<std::mutex> guard{mx};
      ending = true;
    }
    wake.notify_all();
    if (intake.joinable())
      intake.join();
    if (sub != nullptr)
      natsSubscription_Destroy(sub);
    if (inbox != nullptr)
      natsInbox_Destroy(inbox);
    if (js != nullptr)
      jsCtx_Destroy(js);
    if (events_nc != nullptr) {
      // What was published reaches the server before the connection goes.
      natsConnection_FlushTimeout(events_nc, 2000);
      natsConnection_Destroy(events_nc);
    }
    if (nc != nullptr)
      natsConnection_Destroy(nc);
    if (nopts != nullptr)
      natsOptions_Destroy(nopts);
  }

  void say(const std::function<void(const std::string&)>& to,
           const std::string& line) const {
    if (to)
      to(line);
  }

  bool connect(std::string& error) {
    auto urls = split_nats_urls(opts.url);
    std::vector<const char*> servers;
    for (auto& u : urls)
      servers.push_back(u.c_str());
    auto s = natsOptions_Create(&nopts);
    if (s == NATS_OK)
      s = natsOptions_SetServers(nopts, servers.data(),
                                 static_cast<int>(servers.size()));
    if (s == NATS_OK)
      s = natsOptions_SetName(nopts, "tasksup");
    // Once connected, the node rides out a server's restart: it reconnects
    // for as long as it runs, buffering what it publishes meanwhile.
    if (s == NATS_OK)
      s = natsOptions_SetMaxReconnect(nopts, -1);
    if (s == NATS_OK)
      s = natsOptions_SetReconnectWait(nopts, 1000);
    if (s == NATS_OK)
      s = natsOptions_SetDisconnectedCB(
        nopts,
        [](natsConnection*, void* closure) {
          auto* self = static_cast<impl*>(closure);
          self->say(self->log.warn, "nats: disconnected from " +
                                      redact_nats_url(self->opts.url) +
                                      "; reconnecting");
        },
        this);
    if (s == NATS_OK)
      s = natsOptions_SetReconnectedCB(
        nopts,
        [](natsConnection*, void* closure) {
          auto* self = static_cast<impl*>(closure);
          self->say(self->log.info, "nats: reconnected");
        },
        this);
    if (s == NATS_OK)
      s = natsConnection_Connect(&nc, nopts);
    if (s == NATS_OK && !opts.events_prefix.empty())
      s = natsConnection_Connect(&events_nc, nopts);
    if (s != NATS_OK) {
      error = "cannot connect to NATS at " + redact_nats_url(opts.url) + ": " +
              status_text(s);
      return false;
    }
    s = natsConnection_JetStream(&js, nc, nullptr);
    if (s != NATS_OK) {
      error = "NATS at " + redact_nats_url(opts.url) +
              " gave no JetStream context: " + status_text(s);
      return false;
    }
    return true;
  }

  /// The stream that takes `opts.subject`: found, or created.
  bool ensure_stream(std::string& error) {
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = jsErrCode{};
    auto s = js_GetStreamInfo(&si, js, opts.stream.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      bool covers = false;
      for (int i = 0; i < si->Config->SubjectsLen; ++i)
        covers =
          covers || subject_matches(si->Config->Subjects[i], opts.subject);
      jsStreamInfo_Destroy(si);
      if (!covers) {
        error = "the NATS stream '" + opts.stream +
                "' exists but does not take the subject '" + opts.subject +
                "' (--nats-subject); add it to the stream or name another "
                "stream (--nats-stream)";
        return false;
      }
      return true;
    }
    if (s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
      error = "cannot read the NATS stream '" + opts.stream +
              "' (is JetStream enabled on the server? nats-server -js): " +
              status_text(s, jerr);
      return false;
    }
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char* subjects[] = {opts.subject.c_str()};
    cfg.Name = opts.stream.c_str();
    cfg.Description = "task submissions for tasksup";
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    // A submission leaves the stream once a node acked it (journaled).
    cfg.Retention = js_WorkQueuePolicy;
    cfg.Storage = js_FileStorage;
    // Published again within this, a message id is dropped by the server.
    cfg.Duplicates = to_ns(std::chrono::minutes{10});
    cfg.MaxMsgSize = static_cast<std::int32_t>(max_submission_bytes);
    jerr = jsErrCode{};
    s = js_AddStream(&si, js, &cfg, nullptr, &jerr);
    if (s != NATS_OK) {
      error = "cannot create the NATS stream '" + opts.stream + "' for '" +
              opts.subject + "': " + status_text(s, jerr);
      return false;
    }
    jsStreamInfo_Destroy(si);
    say(log.info, "nats: created the stream '" + opts.stream + "' for '" +
                    opts.subject + "' (work queue, on disk)");
    return true;
  }

  /// The durable pull consumer, created when missing, and the inbox its
  /// messages come to. The intake pulls with JetStream's own requests
  /// rather than libnats's natsSubscription_Fetch: Debian's libnats 3.4.1
  /// writes past its batch array when messages of an earlier, expired
  /// request are still queued (it shrinks the batch by the messages it
  /// already has, then counts up to the smaller number), which corrupted
  /// the node's heap now and then under load.
  bool bind_consumer(std::string& error) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = opts.durable.c_str();
    cc.Description = "tasksup's intake";
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = to_ns(opts.ack_wait);
    cc.MaxAckPending =
      static_cast<std::int64_t>(std::max<std::size_t>(opts.batch * 4, 1024));
    cc.FilterSubject = opts.subject.c_str();
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = jsErrCode{};
    auto s = js_AddConsumer(&ci, js, opts.stream.c_str(), &cc, nullptr, &jerr);
    if (s != NATS_OK) {
      // One made before with other settings is used as it is.
      auto why = status_text(s, jerr);
      jerr = jsErrCode{};
      if (js_GetConsumerInfo(&ci, js, opts.stream.c_str(), opts.durable.c_str(),
                             nullptr, &jerr) != NATS_OK) {
        error = "cannot create the durable consumer '" + opts.durable +
                "' of the NATS stream '" + opts.stream + "': " + why;
        return false;
      }
      say(log.warn, "nats: using the consumer '" + opts.durable +
                      "' as it is (" + why + ")");
    }
    jsConsumerInfo_Destroy(ci);
    next_subject =
      "$JS.API.CONSUMER.MSG.NEXT." + opts.stream + "." + opts.durable;
    s = natsInbox_Create(&inbox);
    if (s == NATS_OK)
      s = natsConnection_SubscribeSync(&sub, nc, inbox);
    if (s != NATS_OK) {
      error = "cannot subscribe to an inbox for '" + opts.subject +
              "': " + status_text(s);
      return false;
    }
    return true;
  }

  /// Asks the consumer for up to `room` messages, waiting at most
  /// `wait_ms` for them (0: only those there now): what arrived (messages
  /// of an earlier request that came late too). An error is said in
  /// `error`.
  std::vector<natsMsg*> pull(std::size_t room, std::int64_t wait_ms,
                             natsStatus& error) {
    std::vector<natsMsg*> out;
    auto body =
      "{\"batch\":" + std::to_string(room) +
      (wait_ms > 0 ? ",\"expires\":" + std::to_string(wait_ms * 1000000)
                   : std::string{",\"no_wait\":true"}) +
      "}";
    error = natsConnection_PublishRequestString(nc, next_subject.c_str(), inbox,
                                                body.c_str());
    if (error != NATS_OK)
      return out;
    // The server ends the request by `wait_ms` (408); a little more here.
    auto deadline = nats_Now() + wait_ms + 200;
    while (out.size() < room) {
      auto left = deadline - nats_Now();
      if (left <= 0)
        break;
      natsMsg* m = nullptr;
      auto s = natsSubscription_NextMsg(&m, sub, left);
      if (s == NATS_TIMEOUT)
        break;
      if (s != NATS_OK) {
        error = s;
        break;
      }
      const char* status = nullptr;
      if (natsMsg_GetDataLength(m) == 0 &&
          natsMsgHeader_Get(m, "Status", &status) == NATS_OK) {
        // 404 no messages, 408 expired, 409 the server ended it: this
        // request is over (a status of an earlier one ends this wait too).
        std::string code = status == nullptr ? "" : status;
        natsMsg_Destroy(m);
        if (code == "100")
          continue;
        break;
      }
      out.push_back(m);
    }
    return out;
  }

  /// Answers a message through its ack subject: "+ACK", "+TERM", or
  /// "-NAK" with the delay before it comes again.
  void reply_to(natsMsg* m, const std::string& what) {
    if (const char* reply = natsMsg_GetReply(m); reply != nullptr)
      natsConnection_PublishString(nc, reply, what.c_str());
  }

  void ack(natsMsg* m) { reply_to(m, "+ACK"); }

  void term(natsMsg* m) { reply_to(m, "+TERM"); }

  void nak_later(natsMsg* m) {
    reply_to(m, "-NAK {\"delay\": " + std::to_string(to_ns(opts.retry_delay)) +
                  "}");
  }

  /// Room for more tasks: how many may be fetched now. With `wait`, waits
  /// for the intake to begin and for room; without, may say 0. Nullopt
  /// once the intake ends.
  std::optional<std::size_t> wait_for_room(bool wait) {
    std::unique_lock<std::mutex> lock{mx};
    auto has_room = [this] {
      return began && unfinished.size() + in_flight < opts.max_backlog;
    };
    if (wait)
      wake.wait(lock, [&] { return ending || has_room(); });
    if (ending)
      return std::nullopt;
    if (!has_room())
      return std::size_t{0};
    return std::min(opts.batch,
                    opts.max_backlog - unfinished.size() - in_flight);
  }

  /// Takes room for one more submission, or says there is none.
  bool reserve() {
    std::lock_guard<std::mutex> guard{mx};
    if (unfinished.size() + in_flight >= opts.max_backlog)
      return false;
    ++in_flight;
    return true;
  }

  /// Gives back the room of an answered submission; counts its task
  /// when `taken` (the node took it) and it did not end already.
  void answered(const std::string& id, bool taken) {
    std::lock_guard<std::mutex> guard{mx};
    --in_flight;
    if (taken && recently_ended.count(id) == 0)
      unfinished.insert(id);
  }

  /// Whatever `id` was, it ended: it leaves the backlog.
  bool ended(const std::string& id) {
    std::lock_guard<std::mutex> guard{mx};
    if (recently_ended.insert(id).second) {
      ended_order.push_back(id);
      if (ended_order.size() > std::max<std::size_t>(opts.batch * 16, 4096)) {
        recently_ended.erase(ended_order.front());
        ended_order.pop_front();
      }
    }
    return unfinished.erase(id) > 0;
  }

  /// Whatever `id` is, it started now.
  void started(const std::string& id) {
    std::lock_guard<std::mutex> guard{mx};
    unfinished.insert(id);
    // A task id used again (after `forget`) is a new task.
    if (recently_ended.erase(id) > 0)
      ended_order.erase(std::find(ended_order.begin(), ended_order.end(), id));
  }

  void run_intake() {
    auto last_failure = std::chrono::steady_clock::time_point{};
    std::deque<batch_in_flight> flying;
    // Waits for room only with nothing in flight: answers free room too.
    while (auto room = wait_for_room(flying.empty())) {
      // The oldest batch is answered first when the pipeline is full or
      // the backlog has no room, and every batch once the stream has
      // nothing more.
      if (flying.size() >= max_batches_in_flight || *room == 0) {
        answer(flying.front());
        flying.pop_front();
        continue;
      }
      batch_in_flight b;
      natsStatus s = NATS_OK;
      b.msgs = pull(*room, flying.empty() ? fetch_wait_ms : 0, s);
      if (!b.msgs.empty()) {
        submit(b);
        flying.push_back(std::move(b));
      } else if (s == NATS_OK) {
        while (!flying.empty()) {
          answer(flying.front());
          flying.pop_front();
        }
      }
      if (s != NATS_OK) {
        auto now = std::chrono::steady_clock::now();
        if (now - last_failure > repeat_gap) {
          last_failure = now;
          say(log.warn, "nats: fetching from '" + opts.subject +
                          "' failed: " + status_text(s) + "; trying again");
        }
        std::unique_lock<std::mutex> lock{mx};
        wake.wait_for(lock, std::chrono::seconds{1}, [this] { return ending; });
      }
    }
    // Ending: the batches in hand are still answered.
    for (auto& b : flying)
      answer(b);
  }

  /// Reads a fetched batch and submits what can be a task; terminates the
  /// rest and asks for the messages the node has no room for later.
  void submit(batch_in_flight& b) {
    std::vector<std::string> tasks;
    for (auto* m : b.msgs) {
      auto seq = stream_seq_of(m);
      const char* data = natsMsg_GetData(m);
      auto task = read_submission(
        std::string_view{data == nullptr ? "" : data,
                         static_cast<std::size_t>(natsMsg_GetDataLength(m))},
        msg_id_of(m), seq);
      if (!task) {
        term(m);
        say(log.error, "nats: message " + std::to_string(seq) + " on '" +
                         opts.subject +
                         "' terminated: " + task.error().to_string());
        continue;
      }
      if (!reserve()) {
        nak_later(m);
        continue;
      }
      b.sent.push_back(m);
      b.ids.push_back(task->id);
      tasks.push_back(std::move(task->json));
    }
    b.answers = submit_all(*sys, door, std::move(tasks));
  }

  /// Answers each message of a submitted batch as the node answered its
  /// task, and lets the batch go.
  void answer(batch_in_flight& b) {
    auto answers = b.answers.get();
    for (std::size_t i = 0; i < b.sent.size(); ++i) {
      auto& err = answers[i];
      auto verdict = verdict_for(err);
      answered(b.ids[i], verdict == intake_verdict::ack && !err);
      switch (verdict) {
        case intake_verdict::ack:
          ack(b.sent[i]);
          break;
        case intake_verdict::poison:
          term(b.sent[i]);
          say(log.error,
              "nats: task '" + b.ids[i] + "' terminated: " + error_text(err));
          break;
        case intake_verdict::retry:
          nak_later(b.sent[i]);
          say(log.warn, "nats: task '" + b.ids[i] + "' not taken now (" +
                          error_text(err) + "); redelivered in " +
                          std::to_string(opts.retry_delay.count()) + " ms");
          break;
      }
    }
    for (auto* m : b.msgs)
      natsMsg_Destroy(m);
    b.msgs.clear();
  }

  void publish(const event& ev) {
    if (opts.events_prefix.empty())
      return;
    auto id = id_prefix + std::to_string(++published);
    auto body = cloud_event(ev, id, opts.source);
    auto subject = event_subject(opts.events_prefix,
                                 ev.task_id.empty() ? "_node" : ev.task_id);
    auto s = natsConnection_Publish(events_nc, subject.c_str(), body.data(),
                                    static_cast<int>(body.size()));
    if (s == NATS_OK)
      return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_publish_warning > repeat_gap) {
      last_publish_warning = now;
      say(log.warn, "nats: publishing on '" + subject +
                      "' failed: " + status_text(s) +
                      " (the journal and `tasksup events` still have every "
                      "event)");
    }
  }
};

nats_bridge::nats_bridge(std::unique_ptr<impl> p) : impl_(std::move(p)) {
  // nop
}

nats_bridge::~nats_bridge() = default;

std::unique_ptr<nats_bridge>
nats_bridge::start(const nats_options& opts, caf::actor_system& sys,
                   node_door_actor door, nats_log log, std::string& error) {
  auto p = std::make_unique<impl>();
  p->opts = opts;
  p->sys = &sys;
  p->door = std::move(door);
  p->log = std::move(log);
  std::random_device rd;
  static constexpr char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i)
    p->id_prefix += hex[rd() & 0xf];
  p->id_prefix += '-';
  if (!p->connect(error) || !p->ensure_stream(error) ||
      !p->bind_consumer(error))
    return nullptr;
  auto* raw = p.get();
  p->intake = std::thread{[raw] { raw->run_intake(); }};
  p->say(p->log.info,
         "nats: taking tasks from '" + opts.subject + "' (stream '" +
           opts.stream + "', consumer '" + opts.durable + "') at " +
           redact_nats_url(opts.url) +
           (opts.events_prefix.empty()
              ? std::string{"; publishing no events"}
              : "; events on '" + opts.events_prefix + ".<task id>'"));
  return std::unique_ptr<nats_bridge>{new nats_bridge(std::move(p))};
}

void nats_bridge::begin_intake(std::vector<std::string> unfinished) {
  {
    std::lock_guard<std::mutex> guard{impl_->mx};
    for (auto& id : unfinished)
      impl_->unfinished.insert(std::move(id));
    impl_->began = true;
  }
  impl_->wake.notify_all();
}

void nats_bridge::end_intake() {
  {
    std::lock_guard<std::mutex> guard{impl_->mx};
    impl_->ending = true;
  }
  impl_->wake.notify_all();
}

void nats_bridge::observe(const event& ev) {
  impl_->publish(ev);
  // A submitted task or started group counts until its task_done or its
  // group's end.
  auto change = group_change(ev);
  if (ev.kind == event_kind::task_submitted || change == "started")
    impl_->started(ev.task_id);
  else if ((ev.kind == event_kind::task_done || change == "ended") &&
           impl_->ended(ev.task_id))
    impl_->wake.notify_all();
}

} // namespace tasksup::app
