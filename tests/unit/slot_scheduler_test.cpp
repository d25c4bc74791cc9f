#include "tasksup/supervisor/slot_scheduler.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

/// One step of a scheduling table: an operation and what it answers.
///
/// Operations: `ask ID [local] [runtime=R] [K=V...]`, `free ID`,
/// `reclaim ID [NODE]`, `join NAME MAX [runtime,...] [K=V...]`, `lose NAME`,
/// `hold`, `resume ID...` (the submission order, first to last).
/// Answers: `ID@` (a slot here), `ID@NODE`, `queued` (for `ask`), or the
/// grants the operation made, comma-separated, `-` for none.
struct step {
  const char* op;
  const char* answer;
};

std::vector<std::string> words(const std::string& text) {
  std::istringstream in{text};
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

std::string render(const std::vector<slot_grant>& grants) {
  if (grants.empty())
    return "-";
  std::string out;
  for (auto& g : grants)
    out += (out.empty() ? "" : ",") + g.task_id + "@" + g.node;
  return out;
}

std::string apply(slot_scheduler& s, const std::string& op) {
  auto w = words(op);
  REQUIRE_FALSE(w.empty());
  if (w[0] == "ask") {
    slot_request req{w.at(1), {"process", {}}, false};
    for (std::size_t i = 2; i < w.size(); ++i) {
      auto eq = w[i].find('=');
      if (w[i] == "local")
        req.local_only = true;
      else if (w[i].rfind("runtime=", 0) == 0)
        req.placement.runtime = w[i].substr(8);
      else
        req.placement.labels[w[i].substr(0, eq)] = w[i].substr(eq + 1);
    }
    auto node = s.request(req);
    return node ? req.task_id + "@" + *node : "queued";
  }
  if (w[0] == "free")
    return render(s.release(w.at(1)));
  if (w[0] == "reclaim") {
    s.reclaim(w.at(1), w.size() > 2 ? w[2] : std::string{});
    return "-";
  }
  if (w[0] == "join") {
    node_offer offer;
    offer.name = w.at(1);
    offer.max_concurrent = std::stoi(w.at(2));
    offer.runtimes = {"process"};
    for (std::size_t i = 3; i < w.size(); ++i) {
      auto eq = w[i].find('=');
      if (eq == std::string::npos)
        offer.runtimes = {w[i]};
      else
        offer.labels[w[i].substr(0, eq)] = w[i].substr(eq + 1);
    }
    return render(s.add_node(std::move(offer)));
  }
  if (w[0] == "lose")
    return render(s.remove_node(w.at(1)));
  if (w[0] == "hold") {
    s.hold();
    return "-";
  }
  if (w[0] == "resume") {
    std::map<std::string, std::int64_t> order;
    for (std::size_t i = 1; i < w.size(); ++i)
      order[w[i]] = static_cast<std::int64_t>(i);
    return render(s.resume([&](const std::string& id) { return order[id]; }));
  }
  FAIL("unknown operation: " << op);
  return {};
}

void run(int local_limit, const std::vector<step>& table) {
  slot_scheduler s{local_limit};
  for (auto& x : table) {
    INFO("step: " << x.op);
    CHECK(apply(s, x.op) == x.answer);
  }
}

} // namespace

TEST_CASE("slot scheduler: a node without workers runs its limit, first in "
          "first out") {
  run(2, {
           {"ask t1", "t1@"},
           {"ask t2", "t2@"},
           {"ask t3", "queued"},
           {"ask t4", "queued"},
           {"free t1", "t3@"},
           {"free t4", "-"}, // leaves the queue; nothing is freed
           {"free t2", "-"},
           {"free t3", "-"},
           {"ask t5", "t5@"},
         });
}

TEST_CASE("slot scheduler: a newcomer never overtakes the queue, even when a "
          "slot is free") {
  slot_scheduler s{1};
  CHECK(apply(s, "ask a") == "a@");
  CHECK(apply(s, "ask b") == "queued");
  CHECK(apply(s, "hold") == "-");
  CHECK(apply(s, "free a") == "-"); // held: b keeps waiting
  CHECK(apply(s, "ask c") == "queued");
  CHECK(s.waiting_reason("c") ==
        std::string{"the node is resuming its tasks after a restart"});
  CHECK(apply(s, "resume c b") == "c@"); // submission order: c first
  CHECK(s.queued() == 1);
  CHECK(apply(s, "free c") == "b@");
}

TEST_CASE("slot scheduler: a task that asks for labels never runs on the "
          "coordinator, it waits for a worker node that carries them") {
  slot_scheduler s{2};
  CHECK(apply(s, "ask gpu gpu=yes") == "queued");
  CHECK(s.waiting_reason("gpu") ==
        std::string{"no worker node has joined, and the coordinator carries "
                    "no labels (the task asks for gpu=yes)"});
  // Tasks behind it that fit here are not held up.
  CHECK(apply(s, "ask plain") == "plain@");
  CHECK(apply(s, "free plain") == "-");
  CHECK(apply(s, "join w1 1") == "-");
  CHECK(apply(s, "join w2 1 gpu=yes") == "gpu@w2");
  // Its node gone, a labelled task waits again; a plain one runs here.
  CHECK(apply(s, "lose w1") == "-");
  CHECK(apply(s, "lose w2") == "-");
  CHECK(apply(s, "ask gpu2 gpu=yes") == "queued");
  CHECK(apply(s, "ask local gpu=yes local") == "local@");
  CHECK(apply(s, "ask plain2") == "plain2@");
}

TEST_CASE("slot scheduler: after a restart, tasks wait for the worker nodes "
          "until one joins or the wait ends") {
  slot_scheduler s{2};
  s.await_nodes();
  CHECK(apply(s, "ask a") == "queued");
  CHECK(apply(s, "ask repo local") == "repo@");
  CHECK(apply(s, "ask b") == "queued");
  CHECK(s.waiting_reason("a") ==
        std::string{"waiting for the worker nodes to join again after the "
                    "coordinator's restart"});
  // A worker joins: the wait is over.
  CHECK(apply(s, "join w1 1") == "a@w1");
  CHECK_FALSE(s.awaiting_nodes());
  CHECK(apply(s, "lose w1") == "b@");
  // Or the wait ends without one: the coordinator runs them itself.
  slot_scheduler t{1};
  t.await_nodes();
  CHECK(apply(t, "ask c") == "queued");
  CHECK(apply(t, "ask d") == "queued");
  CHECK(render(t.stop_awaiting_nodes()) == "c@");
  CHECK(apply(t, "free c") == "d@");
}

TEST_CASE("slot scheduler: asking twice keeps the one place") {
  slot_scheduler s{1};
  CHECK(apply(s, "ask a") == "a@");
  CHECK(apply(s, "ask a") == "a@");
  CHECK(s.in_use() == 1);
  CHECK(apply(s, "ask b") == "queued");
  CHECK(apply(s, "ask b") == "queued");
  CHECK(s.queued() == 1);
}

TEST_CASE("slot scheduler: workers take the attempts, the fitting one with "
          "the most free slots") {
  run(1, {
           {"join w1 1", "-"},
           {"join w2 2", "-"},
           {"ask t1", "t1@w2"},
           {"ask t2", "t2@w1"}, // tie: the first by name
           {"ask t3", "t3@w2"},
           {"ask t4", "queued"}, // the workers are full
           // t4 fits nowhere now: r1 takes the free slot here, overtaking
           // no one who could use it (a newcomer waiting behind a task
           // that cannot run would wait for some slot to be given back,
           // forever on an idle node).
           {"ask r1 local", "r1@"},
           {"free t1", "t4@w2"},
           {"join w3 1", "-"},
           {"ask g1 runtime=docker", "queued"}, // no worker has docker
         });
}

TEST_CASE("slot scheduler: a task that fits nowhere does not hold up the "
          "ones behind it") {
  slot_scheduler s{1};
  CHECK(apply(s, "join cpu 1") == "-");
  CHECK(apply(s, "join gpu 1 process gpu=true") == "-");
  CHECK(apply(s, "ask a") == "a@cpu");
  CHECK(apply(s, "ask b gpu=true") == "b@gpu");
  CHECK(apply(s, "ask c gpu=true") == "queued");
  CHECK(apply(s, "ask d") == "queued");
  CHECK_THAT(*s.waiting_reason("c"), Catch::Contains("busy"));
  CHECK(apply(s, "free a") == "d@cpu"); // c needs gpu: d goes past it
  CHECK(apply(s, "free b") == "c@gpu");
  CHECK(apply(s, "ask e zone=mars") == "queued");
  CHECK_THAT(*s.waiting_reason("e"), Catch::Contains("zone"));
  CHECK_FALSE(s.waiting_reason("a"));
}

TEST_CASE("slot scheduler: a lost worker's slots are not counted twice when "
          "it joins again") {
  slot_scheduler s{1};
  CHECK(apply(s, "join w 1") == "-");
  CHECK(apply(s, "ask a") == "a@w");
  CHECK(apply(s, "ask b") == "queued");
  // The worker goes: with no worker left the queue runs here.
  CHECK(apply(s, "lose w") == "b@");
  CHECK(s.node_of("a") == std::string{"w"});
  CHECK(apply(s, "join w 1") == "-"); // b holds the local slot, w is empty
  CHECK(apply(s, "ask c") == "c@w");
  // a's slot was on the old w: giving it back frees nothing on the new one.
  CHECK(apply(s, "free a") == "-");
  CHECK(s.running_on("w") == 1);
  CHECK(apply(s, "ask d") == "queued");
  CHECK(apply(s, "free c") == "d@w");
}

TEST_CASE("slot scheduler: capacity and adopted attempts") {
  slot_scheduler s{3};
  CHECK(s.capacity() == 3);
  s.reclaim("adopted");
  CHECK(s.holds("adopted"));
  CHECK(s.node_of("adopted") == std::string{});
  CHECK(apply(s, "ask a") == "a@");
  CHECK(apply(s, "ask b") == "b@");
  CHECK(apply(s, "ask c") == "queued");
  CHECK(s.in_use() == 3);
  CHECK_THAT(*s.waiting_reason("c"),
             Catch::Contains("all 3 attempt slots of this node are busy"));
  CHECK(apply(s, "join w 5") == "c@w");
  CHECK(s.capacity() == 5);
  CHECK(slot_scheduler{0}.capacity() == 1);
}

TEST_CASE("slot scheduler: an attempt adopted on a worker that has not joined "
          "again counts there once it does") {
  slot_scheduler s{1};
  // Rebuilt after a restart: x's attempt ran on w, which is still away.
  CHECK(apply(s, "reclaim x w") == "-");
  CHECK(s.node_of("x") == std::string{"w"});
  CHECK(s.running_on("w") == 0);
  CHECK(apply(s, "ask a") == "a@"); // the local slot is free
  CHECK(apply(s, "join w 2") == "-");
  CHECK(s.running_on("w") == 1); // x's attempt runs there
  CHECK(apply(s, "ask b") == "b@w");
  CHECK(apply(s, "ask c") == "queued"); // w is full: x and b
  CHECK(apply(s, "free x") == "c@w");
  CHECK(s.running_on("w") == 2);
  // Reclaimed on a joined node: counted at once; moved, counted once.
  CHECK(apply(s, "free b") == "-");
  CHECK(apply(s, "reclaim y w") == "-");
  CHECK(s.running_on("w") == 2);
  CHECK(apply(s, "reclaim y") == "-"); // adopted here after all
  CHECK(s.running_on("w") == 1);
}
