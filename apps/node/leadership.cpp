#include "leadership.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

namespace tasksup::app {

leadership::leadership(std::unique_ptr<journal::leader_lease> lease)
  : lease_(std::move(lease)) {
  standby_text_ = "this coordinator stands by; who leads is not known yet";
}

leadership::~leadership() {
  stop_keeping();
}

void leadership::stop_keeping() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  wake_.notify_all();
  if (keeper_.joinable())
    keeper_.join();
}

double leadership::poll_s() const noexcept {
  // Often enough that a released lease is taken at once, rarely enough to
  // leave the database alone.
  return std::clamp(lease_->lease_s() / 8, 0.05, 1.0);
}

bool leadership::try_take() {
  auto took = lease_->acquire();
  if (took && *took) {
    epoch_ = **took;
    return true;
  }
  std::string text;
  if (!took) {
    text = "this coordinator stands by and cannot read who leads: " +
           took.error().to_string();
  } else if (auto who = lease_->leader(); !who) {
    text = "this coordinator stands by and cannot read who leads: " +
           who.error().to_string();
  } else {
    auto seen = who->holder + "@" + std::to_string(who->epoch);
    leader_news_ = leader_news_ || seen != seen_leader_;
    seen_leader_ = std::move(seen);
    char runs[32];
    std::snprintf(runs, sizeof runs, "%.1f", std::max(0.0, who->expires_in_s));
    text = "this coordinator (" + lease_->holder() + ") stands by: " +
           (who->holder.empty() ? std::string{"nobody"} : who->holder) +
           " leads (epoch " + std::to_string(who->epoch) + ", its lease runs " +
           runs + " s more); ask the leader: --node " + who->address;
  }
  std::lock_guard<std::mutex> guard{mtx_};
  standby_text_ = std::move(text);
  return false;
}

bool leadership::leader_changed() {
  return std::exchange(leader_news_, false);
}

std::string leadership::standby_text() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return standby_text_;
}

void leadership::keep(std::function<void(const std::string&)> deposed) {
  deposed_ = std::move(deposed);
  keeper_ = std::thread{[this] { renew_loop(); }};
}

void leadership::renew_loop() {
  using clock = std::chrono::steady_clock;
  auto lease = std::chrono::duration_cast<clock::duration>(
    std::chrono::duration<double>(lease_->lease_s()));
  auto every = lease / 4;
  // Our lease runs at least until `lease` after a renewal was sent (the
  // database's clock starts it later): past that without a successful one,
  // another coordinator may lead.
  auto valid_until = clock::now() + lease;
  std::unique_lock<std::mutex> lock{mtx_};
  while (!stopping_) {
    wake_.wait_for(lock, every, [this] { return stopping_; });
    if (stopping_)
      break;
    lock.unlock();
    auto sent = clock::now();
    auto renewed = lease_->renew(epoch_);
    std::string why;
    if (renewed && *renewed) {
      valid_until = sent + lease;
    } else if (renewed) {
      why = "this coordinator lost the lease: another one leads now";
    } else if (clock::now() >= valid_until) {
      why = "this coordinator could not renew its lease before it ran out (" +
            renewed.error().to_string() + "): another one may lead now";
    } else {
      spdlog::warn("renewing the leader lease failed: {}; trying again",
                   renewed.error().to_string());
    }
    lock.lock();
    if (!why.empty() && !stopping_) {
      stopping_ = true;
      lock.unlock();
      if (deposed_)
        deposed_(why);
      return;
    }
  }
}

void leadership::release() {
  stop_keeping();
  if (epoch_ > 0)
    if (auto ok = lease_->release(epoch_); !ok)
      spdlog::warn("releasing the leader lease: {}", ok.error().to_string());
}

} // namespace tasksup::app
