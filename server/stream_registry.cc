#include "server/stream_registry.h"

#include <pthread.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace sophon {

StreamRegistry::StreamRegistry(int max_streams, int max_per_peer, absl::Duration check_period,
                               Clock clock)
    : max_streams_(max_streams),
      max_per_peer_(max_per_peer),
      clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })) {
  reaper_ = std::thread([this, check_period] { ReaperLoop(check_period); });
  pthread_setname_np(reaper_.native_handle(), "sophon-reaper");
}

StreamRegistry::~StreamRegistry() {
  stop_.Notify();
  reaper_.join();
}

absl::Status StreamRegistry::Register(const std::string& peer, Member* member, Limit* limit) {
  Member* victim = nullptr;
  std::string victim_peer;
  size_t victim_streams = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!draining_.ok()) {
      if (limit != nullptr) *limit = Limit::kDraining;
      return draining_;
    }
    std::list<Member*>& mine = per_peer_[peer];
    if (static_cast<int>(mine.size()) >= max_per_peer_) {
      if (limit != nullptr) *limit = Limit::kMaxStreamsPerPeer;
      return absl::ResourceExhaustedError(absl::StrCat(
          "client ", peer, " has ", mine.size(),
          " open streams, the limit per client (ServiceOptions.max_streams_per_peer = ",
          max_per_peer_, ")"));
    }
    if (static_cast<int>(members_.size()) >= max_streams_) {
      // Full: the address holding the most streams gives one up, if it
      // holds at least two more than this one (max-min fair slots).
      auto largest = per_peer_.end();
      for (auto it = per_peer_.begin(); it != per_peer_.end(); ++it) {
        if (largest == per_peer_.end() || it->second.size() > largest->second.size()) largest = it;
      }
      if (largest == per_peer_.end() || largest->second.size() < mine.size() + 2) {
        if (mine.empty()) per_peer_.erase(peer);
        if (limit != nullptr) *limit = Limit::kMaxStreams;
        return absl::ResourceExhaustedError(
            absl::StrCat("the server has ", members_.size(),
                         " open streams, its limit (ServiceOptions.max_streams = ", max_streams_,
                         "), and no client holds more than its share; try again later"));
      }
      victim = largest->second.front();
      victim_peer = largest->first;
      victim_streams = largest->second.size();
      largest->second.pop_front();
      members_.erase(victim);
      victim->Ref();  // keeps it alive until it is told below
      ++evicted_;
    }
    mine.push_back(member);
    members_.insert(member);
    ++opened_;
  }
  if (victim != nullptr) {
    victim->Evict(absl::ResourceExhaustedError(absl::StrCat(
        "the server is at its limit of open streams (ServiceOptions.max_streams = ", max_streams_,
        ") and client ", victim_peer, " held the most (", victim_streams,
        "): its oldest stream made room for a client with fewer")));
    victim->Unref();
  }
  return absl::OkStatus();
}

void StreamRegistry::Unregister(const std::string& peer, Member* member) {
  absl::MutexLock lock(&mu_);
  if (members_.erase(member) == 0) return;  // evicted: already gone
  auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;
  it->second.remove(member);
  if (it->second.empty()) per_peer_.erase(it);
}

int StreamRegistry::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(members_.size());
}

uint64_t StreamRegistry::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

uint64_t StreamRegistry::streams_evicted() const {
  absl::MutexLock lock(&mu_);
  return evicted_;
}

std::vector<StreamRegistry::Member*> StreamRegistry::RefMembers() {
  std::vector<Member*> members;
  absl::MutexLock lock(&mu_);
  members.reserve(members_.size());
  for (Member* m : members_) {
    m->Ref();  // keeps it alive after it unregisters
    members.push_back(m);
  }
  return members;
}

void StreamRegistry::CheckAll(absl::Time now) {
  for (Member* m : RefMembers()) {
    m->CheckIdle(now);
    m->Unref();
  }
}

void StreamRegistry::DrainAll(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    draining_ = why;
  }
  for (Member* m : RefMembers()) {
    m->Drain(why);
    m->Unref();
  }
}

void StreamRegistry::EvictAll(const absl::Status& why) {
  for (Member* m : RefMembers()) {
    m->Evict(why);
    m->Unref();
  }
}

void StreamRegistry::ReaperLoop(absl::Duration period) {
  while (!stop_.WaitForNotificationWithTimeout(period)) CheckAll(clock_());
}

std::string PeerAddress(const std::string& peer) {
  if (peer.compare(0, 5, "ipv6:") == 0) {
    // "ipv6:[::1]:5000", or with the brackets URI-escaped: "ipv6:%5B::1%5D:5000".
    size_t end = peer.rfind(']');
    size_t len = 1;
    const size_t escaped = peer.rfind("%5D");
    if (escaped != std::string::npos && (end == std::string::npos || escaped > end)) {
      end = escaped;
      len = 3;
    }
    if (end == std::string::npos) return peer;
    return peer.substr(0, end + len);
  }
  if (peer.compare(0, 5, "ipv4:") != 0) return peer;
  const size_t colon = peer.rfind(':');
  return colon > 4 ? peer.substr(0, colon) : peer;
}

}  // namespace sophon
