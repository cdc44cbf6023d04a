#include "server/unary_calls.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {

UnaryCalls::UnaryCalls(int max_calls, int max_per_peer, BusyFn on_busy)
    : max_calls_(max_calls), max_per_peer_(max_per_peer), on_busy_(std::move(on_busy)) {}

absl::Status UnaryCalls::Admit(const std::string& peer, Limit* limit) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = per_peer_.find(peer);
    const int mine = it == per_peer_.end() ? 0 : it->second;
    if (mine >= max_per_peer_) {
      *limit = Limit::kMaxUnaryCallsPerPeer;
      return absl::ResourceExhaustedError(absl::StrCat(
          "client ", peer, " has ", mine,
          " calls in progress (answers not yet taken), the limit per client "
          "(ServiceOptions.max_unary_calls_per_peer = ",
          max_per_peer_, ")"));
    }
    if (total_ >= max_calls_) {
      *limit = Limit::kMaxUnaryCalls;
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server has ", total_,
          " calls in progress (answers not yet taken), its limit "
          "(ServiceOptions.max_unary_calls = ",
          max_calls_, "); try again later"));
    }
    ++per_peer_[peer];
    first = total_++ == 0;
  }
  if (first && on_busy_) on_busy_(true);
  return absl::OkStatus();
}

void UnaryCalls::Release(const std::string& peer) {
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = per_peer_.find(peer);
    if (it == per_peer_.end()) return;
    if (--it->second == 0) per_peer_.erase(it);
    last = --total_ == 0;
  }
  if (last && on_busy_) on_busy_(false);
}

int UnaryCalls::inflight() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

int UnaryCalls::inflight(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

}  // namespace sophon
