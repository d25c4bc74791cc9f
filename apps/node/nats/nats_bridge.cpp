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

/// The comma-separated URLs of `url`, trimmed.
std::vector<std::string> split_urls(const std::string& url) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= url.size()) {
    auto end = std::min(url.find(',', pos), url.size());
    auto one = url.substr(pos, end - pos);
    auto first = one.find_first_not_of(" \t");
    auto last = one.find_last_not_of(" \t");
    if (first != std::string::npos)
      out.push_back(one.substr(first, last - first + 1));
    pos = end + 1;
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

/// The message's sequence number in its stream (0 when it has none).
std::uint64_t stream_seq_of(natsMsg* m) {
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, m) != NATS_OK || meta == nullptr)
    return 0;
  auto seq = meta->Sequence.Stream;
  jsMsgMetaData_Destroy(meta);
  return seq;
}

/// Whether `ev` ends what counts in the backlog: a task's `task_done`, a
/// group's `ended`.
bool ends_backlog_entry(const event& ev) {
  if (ev.kind == event_kind::task_done)
    return true;
  if (ev.kind != event_kind::group)
    return false;
  if (auto* f = ev.fields())
    if (auto* g = std::get_if<event_data::group>(&f->data))
      return g->change == "ended";
  boost::system::error_code ec;
  auto doc = boost::json::parse(ev.json(), ec);
  if (ec || !doc.is_object())
    return false;
  auto* change = doc.get_object().if_contains("change");
  return change && change->is_string() && change->get_string() == "ended";
}

/// Whether `ev` starts something the backlog counts.
bool starts_backlog_entry(const event& ev) {
  if (ev.kind == event_kind::task_submitted)
    return true;
  if (ev.kind != event_kind::group)
    return false;
  if (auto* f = ev.fields())
    if (auto* g = std::get_if<event_data::group>(&f->data))
      return g->change == "started";
  return false;
}

/// Sends every submission to the door at once (the journal commits them
/// together) and waits for all the answers: none for a task journaled.
std::vector<caf::error> submit_all(caf::actor_system& sys,
                                   const node_door_actor& door,
                                   std::vector<std::string> tasks) {
  if (tasks.empty())
    return {};
  auto done = std::make_shared<std::promise<std::vector<caf::error>>>();
  auto answers = done->get_future();
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
  return answers.get();
}

} // namespace

struct nats_bridge::impl {
  nats_options opts;
  caf::actor_system* sys = nullptr;
  node_door_actor door;
  nats_log log;
  natsOptions* nopts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  natsSubscription* sub = nullptr;
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
  figures fig;

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
    if (js != nullptr)
      jsCtx_Destroy(js);
    if (nc != nullptr) {
      // What was published reaches the server before the connection goes.
      natsConnection_FlushTimeout(nc, 2000);
      natsConnection_Destroy(nc);
    }
    if (nopts != nullptr)
      natsOptions_Destroy(nopts);
  }

  void say(const std::function<void(const std::string&)>& to,
           const std::string& line) const {
    if (to)
      to(line);
  }

  bool connect(std::string& error) {
    auto urls = split_urls(opts.url);
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

  bool bind_consumer(std::string& error) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = opts.stream.c_str();
    so.Config.AckPolicy = js_AckExplicit;
    so.Config.AckWait = to_ns(opts.ack_wait);
    so.Config.MaxAckPending =
      static_cast<std::int64_t>(std::max<std::size_t>(opts.batch * 4, 1024));
    jsErrCode jerr = jsErrCode{};
    auto s = js_PullSubscribe(&sub, js, opts.subject.c_str(),
                              opts.durable.c_str(), nullptr, &so, &jerr);
    if (s != NATS_OK) {
      error = "cannot read '" + opts.subject + "' with the durable consumer '" +
              opts.durable + "' of the stream '" + opts.stream +
              "': " + status_text(s, jerr);
      return false;
    }
    return true;
  }

  /// Room for more tasks: how many may be fetched now (0 while the backlog
  /// is full), after waiting for the intake to begin; nullopt once it ends.
  std::optional<std::size_t> wait_for_room() {
    std::unique_lock<std::mutex> lock{mx};
    wake.wait(lock, [this] {
      return ending || (began && unfinished.size() < opts.max_backlog);
    });
    if (ending)
      return std::nullopt;
    return std::min(opts.batch, opts.max_backlog - unfinished.size());
  }

  bool backlog_full() const {
    std::lock_guard<std::mutex> guard{mx};
    return unfinished.size() >= opts.max_backlog;
  }

  /// Counts a task the node just took, unless it ended already.
  void taken(const std::string& id) {
    std::lock_guard<std::mutex> guard{mx};
    if (recently_ended.count(id) == 0)
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

  void count(std::uint64_t figures::*which) {
    std::lock_guard<std::mutex> guard{mx};
    ++(fig.*which);
  }

  void run_intake() {
    auto last_failure = std::chrono::steady_clock::time_point{};
    while (auto room = wait_for_room()) {
      natsMsgList list{nullptr, 0};
      jsErrCode jerr = jsErrCode{};
      auto s = natsSubscription_Fetch(&list, sub, static_cast<int>(*room),
                                      fetch_wait_ms, &jerr);
      if (s == NATS_TIMEOUT)
        continue;
      if (s != NATS_OK) {
        auto now = std::chrono::steady_clock::now();
        if (now - last_failure > repeat_gap) {
          last_failure = now;
          say(log.warn, "nats: fetching from '" + opts.subject + "' failed: " +
                          status_text(s, jerr) + "; trying again");
        }
        std::unique_lock<std::mutex> lock{mx};
        wake.wait_for(lock, std::chrono::seconds{1}, [this] { return ending; });
        continue;
      }
      take(list);
      natsMsgList_Destroy(&list);
    }
  }

  /// Submits a fetched batch and answers each message.
  void take(natsMsgList& list) {
    std::vector<natsMsg*> sent;
    std::vector<std::string> tasks;
    std::vector<std::string> ids;
    for (int i = 0; i < list.Count; ++i) {
      auto* m = list.Msgs[i];
      auto seq = stream_seq_of(m);
      const char* data = natsMsg_GetData(m);
      auto task = read_submission(
        std::string_view{data == nullptr ? "" : data,
                         static_cast<std::size_t>(natsMsg_GetDataLength(m))},
        msg_id_of(m), seq);
      if (!task) {
        natsMsg_Term(m, nullptr);
        count(&figures::poison);
        say(log.error, "nats: message " + std::to_string(seq) + " on '" +
                         opts.subject +
                         "' terminated: " + task.error().to_string());
        continue;
      }
      if (backlog_full()) {
        natsMsg_NakWithDelay(m, opts.retry_delay.count(), nullptr);
        count(&figures::retried);
        continue;
      }
      sent.push_back(m);
      ids.push_back(task->id);
      tasks.push_back(std::move(task->json));
    }
    auto answers = submit_all(*sys, door, std::move(tasks));
    for (std::size_t i = 0; i < sent.size(); ++i) {
      auto& err = answers[i];
      switch (verdict_for(err)) {
        case intake_verdict::ack:
          natsMsg_Ack(sent[i], nullptr);
          if (!err)
            taken(ids[i]);
          count(err ? &figures::duplicates : &figures::accepted);
          break;
        case intake_verdict::poison:
          natsMsg_Term(sent[i], nullptr);
          count(&figures::poison);
          say(log.error,
              "nats: task '" + ids[i] + "' terminated: " + error_text(err));
          break;
        case intake_verdict::retry:
          natsMsg_NakWithDelay(sent[i], opts.retry_delay.count(), nullptr);
          count(&figures::retried);
          say(log.warn, "nats: task '" + ids[i] + "' not taken now (" +
                          error_text(err) + "); redelivered in " +
                          std::to_string(opts.retry_delay.count()) + " ms");
          break;
      }
    }
  }

  void publish(const event& ev) {
    if (opts.events_prefix.empty())
      return;
    auto id = id_prefix + std::to_string(++published);
    auto body = cloud_event(ev, id, opts.source);
    auto subject = event_subject(opts.events_prefix,
                                 ev.task_id.empty() ? "_node" : ev.task_id);
    natsMsg* m = nullptr;
    auto s = natsMsg_Create(&m, subject.c_str(), nullptr, body.data(),
                            static_cast<int>(body.size()));
    if (s == NATS_OK)
      s = natsMsgHeader_Set(m, "Nats-Msg-Id", id.c_str());
    if (s == NATS_OK)
      s = natsConnection_PublishMsg(nc, m);
    natsMsg_Destroy(m);
    if (s == NATS_OK) {
      count(&figures::published);
      return;
    }
    count(&figures::publish_failed);
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
  if (starts_backlog_entry(ev))
    impl_->started(ev.task_id);
  else if (ends_backlog_entry(ev) && impl_->ended(ev.task_id))
    impl_->wake.notify_all();
}

nats_bridge::figures nats_bridge::stats() const {
  std::lock_guard<std::mutex> guard{impl_->mx};
  return impl_->fig;
}

} // namespace tasksup::app
