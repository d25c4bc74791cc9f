#pragma once

// The node's bridge to NATS JetStream (docs/BEHAVIOUR.md, "NATS
// JetStream"), with `serve --nats`:
// - intake: task submissions from a durable pull consumer on a subject, in
//   a stream the bridge creates when it is missing. A message is acked only
//   once its task is journaled; a redelivered one, or one published again
//   with the same `Nats-Msg-Id`, names the same task and so makes none; an
//   invalid one is terminated (never redelivered) with its reason logged;
//   while the node has `max_backlog` unfinished tasks the bridge fetches
//   nothing and asks NATS to redeliver what it holds later.
// - publishing: every event of the node, one CloudEvents-style document
//   (nats_messages.hpp) on `tasksup.events.<task id>`.

#include "tasksup/actors/node_door_actor.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tasksup::app {

/// Settings of the bridge (`serve --nats*`), with their defaults.
struct nats_options {
  /// `nats://HOST:PORT` (several, comma-separated, for a cluster).
  std::string url;
  /// Where submissions arrive.
  std::string subject = "tasksup.submit";
  /// The stream that holds them; created (work-queue retention, file
  /// storage) when missing.
  std::string stream = "TASKSUP";
  /// The durable consumer the node reads them with.
  std::string durable = "tasksup";
  /// Events go to `<events_prefix>.<task id>`; empty: none are published.
  std::string events_prefix = "tasksup.events";
  /// The most unfinished tasks the node takes more submissions with.
  std::size_t max_backlog = 10000;
  /// Messages fetched (and submitted together) at most at once.
  std::size_t batch = 256;
  /// How long a fetched message may stay unanswered before NATS hands it
  /// out again (the consumer's ack wait).
  std::chrono::milliseconds ack_wait{30000};
  /// When a submission the node could not take now is redelivered.
  std::chrono::milliseconds retry_delay{5000};
  /// The `source` of the published events, e.g. `tasksup://host:port`.
  std::string source = "tasksup";
};

/// What the bridge tells the node's log.
struct nats_log {
  std::function<void(const std::string&)> info;
  std::function<void(const std::string&)> warn;
  std::function<void(const std::string&)> error;
};

/// The bridge: a NATS connection, the intake's thread and the publisher.
class nats_bridge {
public:
  /// Connects, creates the stream when missing and binds the durable
  /// consumer. Null, with `error` saying why, when any of that fails.
  /// Submissions go to `door`; nothing is fetched before `begin_intake`.
  static std::unique_ptr<nats_bridge> start(const nats_options& opts,
                                            caf::actor_system& sys,
                                            node_door_actor door, nats_log log,
                                            std::string& error);

  nats_bridge(const nats_bridge&) = delete;
  nats_bridge& operator=(const nats_bridge&) = delete;

  /// Stops the intake (answering the batch in hand), flushes what was
  /// published and closes the connection.
  ~nats_bridge();

  /// Starts fetching, the node's unfinished tasks being `unfinished`.
  void begin_intake(std::vector<std::string> unfinished);

  /// Fetches no more (the node is shutting down); the batch in hand is
  /// still answered.
  void end_intake();

  /// Publishes `ev` and keeps the backlog: a submitted task or started
  /// group counts until its `task_done` or its group's end. From one
  /// thread (the node's event loop).
  void observe(const event& ev);

private:
  struct impl;
  explicit nats_bridge(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace tasksup::app
