#include "server/byte_budget.h"

#include <algorithm>
#include <utility>

namespace sophon {

ByteBudget::ByteBudget(const Options& options, TransitionFn on_transition)
    : options_(options), on_transition_(std::move(on_transition)), share_(options.capacity) {}

ByteBudget::~ByteBudget() = default;

bool ByteBudget::PeerAllowsLocked(const Peer& peer, int64_t bytes) const {
  return peer.held == 0 || peer.held + bytes <= options_.max_peer_bytes;
}

int64_t ByteBudget::KeptLocked(const Peer& peer) const {
  return peer.streams > 0 ? std::max<int64_t>(0, share_ - peer.held) : 0;
}

bool ByteBudget::FitsLocked(const Peer& peer, int64_t bytes) const {
  if (used_ == 0) return true;
  // While streams are open, one more share is kept for an address that has
  // none yet (a client that comes after a hog filled the rest finds it): an
  // address may go past its own share only beyond that one (no more of it
  // than max_peer_bytes leaves: an operator who lets one address hold more
  // keeps less for newcomers).
  const int64_t newcomer =
      streams_ > 0 && peer.held + bytes > share_
          ? std::clamp<int64_t>(options_.capacity - options_.max_peer_bytes, 0, share_)
          : 0;
  return used_ + bytes <= options_.capacity - (kept_ - KeptLocked(peer)) - newcomer;
}

ByteBudget::Peer& ByteBudget::PeerLocked(const std::string& name) {
  auto [it, inserted] = peers_.try_emplace(name);
  if (inserted) RecountLocked();
  return it->second;
}

void ByteBudget::RecountLocked() {
  // With streams open, the addresses and a newcomer share the capacity.
  const size_t sharers = peers_.size() + (streams_ > 0 ? 1 : 0);
  share_ = options_.capacity / static_cast<int64_t>(std::max<size_t>(1, sharers));
  kept_ = 0;
  for (const auto& [name, peer] : peers_) kept_ += KeptLocked(peer);
}

void ByteBudget::AddLocked(Peer& peer, int64_t bytes) {
  const bool was_busy = used_ > options_.quiet_bytes;
  kept_ -= KeptLocked(peer);
  used_ = std::max<int64_t>(0, used_ + bytes);
  peer.held = std::max<int64_t>(0, peer.held + bytes);
  kept_ += KeptLocked(peer);
  peak_ = std::max(peak_, used_);
  const bool busy = used_ > options_.quiet_bytes;
  if (on_transition_ && busy != was_busy) on_transition_(busy);
}

void ByteBudget::ForgetIfEmptyLocked(const std::string& name) {
  auto it = peers_.find(name);
  if (it != peers_.end() && it->second.held == 0 && it->second.waiting == 0 &&
      it->second.streams == 0) {
    peers_.erase(it);
    RecountLocked();
  }
}

void ByteBudget::GrantLocked(std::vector<Grant>* grants) {
  while (!queue_.empty()) {
    // Max-min fair share of each address that holds, waits or has a stream
    // open: share_.
    auto pick = queue_.end();
    auto first_allowed = queue_.end();
    // Addresses whose first waiter is held back by the address's own cap:
    // their later waiters wait behind it (first come, first served within an
    // address too), while other addresses go on.
    std::vector<const std::string*> capped;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (std::any_of(capped.begin(), capped.end(),
                      [&](const std::string* c) { return *c == it->peer; })) {
        continue;
      }
      const Peer& peer = peers_[it->peer];
      if (!PeerAllowsLocked(peer, it->bytes)) {  // waits for its own address
        capped.push_back(&it->peer);
        continue;
      }
      if (peer.held < share_) {
        pick = it;
        break;
      }
      if (first_allowed == queue_.end()) first_allowed = it;
    }
    if (pick == queue_.end()) pick = first_allowed;
    if (pick == queue_.end()) return;
    if (!FitsLocked(peers_[pick->peer], pick->bytes)) {
      // The head's reservation: nobody behind it takes bytes until it fits
      // (an empty budget admits anything, so that one sample larger than the
      // capacity cannot wait forever), except an address drawing on the
      // share kept for it, which takes nothing the head waits for.
      auto own = queue_.end();
      for (auto it = queue_.begin(); it != queue_.end() && own == queue_.end(); ++it) {
        const Peer& peer = peers_[it->peer];
        if (it->peer != pick->peer && peer.streams > 0 && peer.held + it->bytes <= share_ &&
            PeerAllowsLocked(peer, it->bytes) && FitsLocked(peer, it->bytes) &&
            std::none_of(capped.begin(), capped.end(),
                         [&](const std::string* c) { return *c == it->peer; })) {
          own = it;
        }
      }
      if (own == queue_.end()) return;
      pick = own;
    }
    const std::string name = pick->peer;
    Peer& peer = peers_[name];
    AddLocked(peer, pick->bytes);
    --peer.waiting;
    ++grants_;
    grants->push_back(Grant{pick->waiter, pick->bytes});
    queue_.erase(pick);
    ForgetIfEmptyLocked(name);  // a grant of 0 bytes leaves nothing held
  }
}

void ByteBudget::Join(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ++PeerLocked(name).streams;
  ++streams_;
  RecountLocked();
}

void ByteBudget::Leave(const std::string& name) {
  std::vector<Grant> grants;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(name);
    if (it == peers_.end() || it->second.streams == 0) return;
    --it->second.streams;
    --streams_;
    ForgetIfEmptyLocked(name);
    RecountLocked();
    GrantLocked(&grants);  // the share it kept may let others in
  }
  notifier_.Deliver(grants);
}

bool ByteBudget::Acquire(const std::string& peer_name, int64_t bytes, Waiter* waiter) {
  std::vector<Grant> grants;
  bool granted_now = false;
  {
    absl::MutexLock lock(&mu_);
    Peer& peer = PeerLocked(peer_name);
    // Nobody waits: what the queue would decide for a lone waiter, without
    // queueing it (the path of every sample while bytes are plentiful).
    if (queue_.empty() && PeerAllowsLocked(peer, bytes) && FitsLocked(peer, bytes)) {
      AddLocked(peer, bytes);
      ForgetIfEmptyLocked(peer_name);  // a reservation of 0 bytes leaves nothing held
      return true;
    }
    ++peer.waiting;
    queue_.push_back(Queued{waiter, peer_name, bytes});
    GrantLocked(&grants);
    // Granted in this very call: the caller goes on without a notification.
    auto self = std::find_if(grants.begin(), grants.end(),
                             [waiter](const Grant& g) { return g.waiter == waiter; });
    if (self != grants.end()) {
      granted_now = true;
      --grants_;  // not a wake-up
      grants.erase(self);
    }
  }
  notifier_.Deliver(grants);
  return granted_now;
}

void ByteBudget::Release(const std::string& peer_name, int64_t bytes) {
  if (bytes <= 0) return;
  std::vector<Grant> grants;
  {
    absl::MutexLock lock(&mu_);
    AddLocked(PeerLocked(peer_name), -bytes);
    ForgetIfEmptyLocked(peer_name);
    GrantLocked(&grants);
  }
  notifier_.Deliver(grants);
}

bool ByteBudget::Cancel(Waiter* waiter) {
  std::vector<Grant> grants;
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [waiter](const Queued& q) { return q.waiter == waiter; });
    if (it != queue_.end()) {
      found = true;
      const std::string name = it->peer;
      --peers_[name].waiting;
      queue_.erase(it);
      ForgetIfEmptyLocked(name);
      // The head may have left: the next ones may fit now.
      GrantLocked(&grants);
    }
  }
  notifier_.Deliver(grants);
  return found;
}

int64_t ByteBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int64_t ByteBudget::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

int ByteBudget::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int64_t ByteBudget::peer_used(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.held;
}

uint64_t ByteBudget::grants() const {
  absl::MutexLock lock(&mu_);
  return grants_;
}

}  // namespace sophon
