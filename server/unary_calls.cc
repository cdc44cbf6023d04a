#include "server/unary_calls.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sophon {

UnaryCalls::UnaryCalls(int max_calls, int max_per_peer, int max_waiting,
                       absl::Duration wait_timeout, BusyFn on_busy)
    : max_calls_(max_calls),
      max_per_peer_(max_per_peer),
      max_waiting_(max_waiting),
      wait_timeout_(wait_timeout),
      on_busy_(std::move(on_busy)) {
  if (max_waiting_ > 0) {
    expirer_ = std::thread([this] { ExpireLoop(); });
    pthread_setname_np(expirer_.native_handle(), "sophon-unarywait");
  }
}

UnaryCalls::~UnaryCalls() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    waiters_changed_.Signal();
  }
  if (expirer_.joinable()) expirer_.join();
}

void UnaryCalls::ExpireLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (all_waiting_.empty()) {
      waiters_changed_.Wait(&mu_);
      continue;
    }
    const absl::Time now = absl::Now();
    if (all_waiting_.front()->deadline_ > now) {
      waiters_changed_.WaitWithDeadline(&mu_, all_waiting_.front()->deadline_);
      continue;
    }
    std::vector<std::pair<Waiter*, absl::Status>> expired;
    std::vector<Limit> limits;
    while (!all_waiting_.empty() && all_waiting_.front()->deadline_ <= now) {
      Waiter* w = all_waiting_.front();
      const std::string peer = *w->peer_;
      Peer& p = peers_[peer];
      Limit limit = Limit::kMaxUnaryCalls;
      absl::Status status = LimitStatus(peer, p.calls, &limit);
      Unqueue(p, w);
      EraseIfIdle(peer);
      expired.emplace_back(w, absl::Status(
                                  status.code(),
                                  absl::StrCat(status.message(), "; waited ",
                                               absl::FormatDuration(wait_timeout_),
                                               " (ServiceOptions.unary_wait_timeout)")));
      limits.push_back(limit);
    }
    mu_.Unlock();
    for (size_t i = 0; i < expired.size(); ++i) {
      expired[i].first->WaitTimedOut(expired[i].second, limits[i]);
    }
    mu_.Lock();
  }
}

void UnaryCalls::Unqueue(Peer& p, Waiter* w) {
  p.waiting.erase(w->pos_);
  all_waiting_.erase(w->all_pos_);
  w->queued_ = false;
  --waiting_;
}

int UnaryCalls::Cap() const {
  const int share = max_calls_ / (static_cast<int>(peers_.size()) + 1);
  return std::max(1, std::min(max_per_peer_, share));
}

bool UnaryCalls::MayTake(const Peer& p) const {
  return total_ < max_calls_ && p.calls < Cap();
}

absl::Status UnaryCalls::LimitStatus(const std::string& peer, int mine, Limit* limit) const {
  if (mine >= max_per_peer_) {
    *limit = Limit::kMaxUnaryCallsPerPeer;
    return absl::ResourceExhaustedError(absl::StrCat(
        "client ", peer, " has ", mine,
        " calls in progress (answers not yet taken), the limit per client "
        "(ServiceOptions.max_unary_calls_per_peer = ",
        max_per_peer_, ")"));
  }
  *limit = Limit::kMaxUnaryCalls;
  if (total_ < max_calls_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "client ", peer, " has ", mine,
        " calls in progress (answers not yet taken), its share of the server's limit "
        "(ServiceOptions.max_unary_calls = ",
        max_calls_, " shared by ", peers_.size(), " client addresses and one to come: ", Cap(),
        " each)"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has ", total_,
      " calls in progress (answers not yet taken), its limit "
      "(ServiceOptions.max_unary_calls = ",
      max_calls_, "); try again later"));
}

UnaryCalls::Admission UnaryCalls::AdmitOrWait(const std::string& peer, Waiter* waiter,
                                              Limit* limit, absl::Status* status) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    Peer& p = peers_[peer];
    if (!p.waiting.empty() || !MayTake(p)) return Queue(peer, p, waiter, limit, status);
    ++p.calls;
    first = total_++ == 0;
  }
  if (first && on_busy_) on_busy_(true);
  return Admission::kAdmitted;
}

UnaryCalls::Admission UnaryCalls::Queue(const std::string& peer, Peer& p, Waiter* waiter,
                                        Limit* limit, absl::Status* status) {
  if (p.waiting.empty() || !MayTake(p)) {
    *status = LimitStatus(peer, p.calls, limit);
  } else {
    // Behind its own address's waiting calls, which go first.
    *limit = Limit::kMaxUnaryCallsPerPeer;
    *status = absl::ResourceExhaustedError(absl::StrCat(
        "client ", peer, " has ", p.waiting.size(), " calls waiting for a slot ahead of this one"));
  }
  if (waiting_ >= max_waiting_) {
    *status = absl::Status(
        status->code(), absl::StrCat(status->message(), ", and ", waiting_,
                                     " calls wait already (ServiceOptions.max_waiting_unary_calls = ",
                                     max_waiting_, ")"));
    EraseIfIdle(peer);
    return Admission::kRefused;
  }
  waiter->pos_ = p.waiting.insert(p.waiting.end(), waiter);
  waiter->all_pos_ = all_waiting_.insert(all_waiting_.end(), waiter);
  waiter->peer_ = &peers_.find(peer)->first;
  waiter->deadline_ = absl::Now() + wait_timeout_;
  waiter->queued_ = true;
  if (++waiting_ == 1) waiters_changed_.Signal();
  return Admission::kWaiting;
}

bool UnaryCalls::StopWaiting(const std::string& peer, Waiter* waiter) {
  absl::MutexLock lock(&mu_);
  if (!waiter->queued_) return false;
  auto it = peers_.find(peer);
  if (it == peers_.end()) return false;  // not reached: a queued waiter's peer is kept
  Unqueue(it->second, waiter);
  EraseIfIdle(peer);
  return true;
}

UnaryCalls::Waiter* UnaryCalls::AdmitFirst(Peer& p) {
  Waiter* w = p.waiting.front();
  Unqueue(p, w);
  ++p.calls;
  ++total_;
  return w;
}

void UnaryCalls::EraseIfIdle(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second.calls == 0 && it->second.waiting.empty()) {
    peers_.erase(it);
  }
}

void UnaryCalls::Release(const std::string& peer) {
  std::vector<Waiter*> admitted;
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end() || it->second.calls == 0) return;
    --it->second.calls;
    --total_;
    EraseIfIdle(peer);
    // The freed slot, and any that an address leaving made everyone's share
    // grow by, each to the waiting address with the fewest calls that may
    // take one (this one's first among equals).
    while (waiting_ > 0 && total_ < max_calls_) {
      Peer* next = nullptr;
      auto mine = peers_.find(peer);
      if (mine != peers_.end() && !mine->second.waiting.empty() && MayTake(mine->second)) {
        next = &mine->second;
      }
      for (auto& [name, q] : peers_) {
        if (!q.waiting.empty() && MayTake(q) && (next == nullptr || q.calls < next->calls)) {
          next = &q;
        }
      }
      if (next == nullptr) break;
      admitted.push_back(AdmitFirst(*next));
    }
    last = total_ == 0;
  }
  for (Waiter* w : admitted) w->Admitted();
  if (last && on_busy_) on_busy_(false);
}

int UnaryCalls::inflight() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

int UnaryCalls::inflight(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.calls;
}

int UnaryCalls::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

}  // namespace sophon
