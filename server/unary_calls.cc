#include "server/unary_calls.h"

#include <pthread.h>

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
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has ", total_,
      " calls in progress (answers not yet taken), its limit "
      "(ServiceOptions.max_unary_calls = ",
      max_calls_, "); try again later"));
}

absl::Status UnaryCalls::Admit(const std::string& peer, Limit* limit) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    const int mine = it == peers_.end() ? 0 : it->second.calls;
    if (mine >= max_per_peer_ || total_ >= max_calls_) return LimitStatus(peer, mine, limit);
    ++peers_[peer].calls;
    first = total_++ == 0;
  }
  if (first && on_busy_) on_busy_(true);
  return absl::OkStatus();
}

UnaryCalls::Admission UnaryCalls::AdmitOrWait(const std::string& peer, Waiter* waiter,
                                              Limit* limit, absl::Status* status) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    Peer& p = peers_[peer];
    if (p.waiting.empty() && p.calls < max_per_peer_ && total_ < max_calls_) {
      ++p.calls;
      first = total_++ == 0;
    } else {
      *status = LimitStatus(peer, p.calls, limit);
      if (waiting_ >= max_waiting_) {
        *status = absl::Status(
            status->code(),
            absl::StrCat(status->message(), ", and ", waiting_,
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
      if (p.calls < max_per_peer_ && !p.in_turns) {
        p.in_turns = true;
        turns_.push_back(peer);
      }
      return Admission::kWaiting;
    }
  }
  if (first && on_busy_) on_busy_(true);
  return Admission::kAdmitted;
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
  if (it != peers_.end() && it->second.calls == 0 && it->second.waiting.empty() &&
      !it->second.in_turns) {
    peers_.erase(it);
  }
}

void UnaryCalls::Release(const std::string& peer) {
  Waiter* admitted = nullptr;
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end() || it->second.calls == 0) return;
    Peer& p = it->second;
    --p.calls;
    --total_;
    if (total_ < max_calls_) {
      if (!p.waiting.empty() && p.calls < max_per_peer_) {
        admitted = AdmitFirst(p);  // this address's own slot, in its order
      } else {
        // A slot of the server's: the next address whose first waiter only
        // waits for one.
        while (admitted == nullptr && !turns_.empty()) {
          const std::string next = std::move(turns_.front());
          turns_.pop_front();
          auto n = peers_.find(next);
          if (n == peers_.end()) continue;
          Peer& q = n->second;
          q.in_turns = false;
          if (!q.waiting.empty() && q.calls < max_per_peer_) {
            admitted = AdmitFirst(q);
            if (!q.waiting.empty() && q.calls < max_per_peer_) {
              q.in_turns = true;
              turns_.push_back(next);
            }
          }
          EraseIfIdle(next);
        }
      }
    }
    // Its next waiter now waits only for the server's slots (found again:
    // the turns may have erased it).
    it = peers_.find(peer);
    if (it != peers_.end()) {
      Peer& mine = it->second;
      if (!mine.waiting.empty() && mine.calls < max_per_peer_ && !mine.in_turns) {
        mine.in_turns = true;
        turns_.push_back(peer);
      }
      EraseIfIdle(peer);
    }
    last = total_ == 0;
  }
  if (admitted != nullptr) admitted->Admitted();
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
