// The open Fetch streams of a server: admission by count (in all and per
// client address) and a reaper thread that asks every stream, once per
// period, whether it has been idle too long.
#ifndef SOPHON_SERVER_STREAM_REGISTRY_H_
#define SOPHON_SERVER_STREAM_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/counted_member.h"
#include "server/limit.h"

namespace sophon {

class StreamRegistry {
 public:
  // A registered stream. Ref/Unref keep it alive while the registry calls it.
  class Member : public CountedMember {
   public:
    // Called from the reaper thread without the registry's lock held; the
    // member ends itself if its client has left it idle too long at `now`.
    virtual void CheckIdle(absl::Time now) = 0;
    // Called without the registry's lock held when the registry makes room
    // for another address's stream: the member ends itself with `why`.
    virtual void Evict(absl::Status why) = 0;
    // Called without the registry's lock held when the server drains: the
    // member stops reading requests, hands back the samples it has not
    // started (the client asks elsewhere), finishes the ones it has and ends
    // itself with `why`.
    virtual void Drain(absl::Status why) = 0;
  };
  using Clock = std::function<absl::Time()>;

  // REQUIRES: max_streams >= 1, max_per_peer >= 1, check_period > 0.
  // `clock` (absl::Now if empty) is the time the reaper passes to CheckIdle.
  StreamRegistry(int max_streams, int max_per_peer, absl::Duration check_period,
                 Clock clock = nullptr);
  // Stops and joins the reaper. Members must have unregistered.
  ~StreamRegistry();

  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // Admits a stream from `peer` (a client address without its port).
  // RESOURCE_EXHAUSTED naming ServiceOptions.max_streams_per_peer when the
  // address is at its cap. When the server is at max_streams, slots are
  // shared max-min fairly across addresses: a stream from an address with
  // fewer streams than the largest holder evicts that holder's oldest
  // stream; otherwise it is refused naming ServiceOptions.max_streams.
  // Thread-safe. *limit (if not null) names the limit hit.
  absl::Status Register(const std::string& peer, Member* member, Limit* limit = nullptr);
  // REQUIRES: `member` was registered from `peer`.
  void Unregister(const std::string& peer, Member* member);
  // One reaper pass: CheckIdle(now) on every member. The reaper thread calls
  // it once per period; tests call it to decide at a time of their choosing.
  void CheckAll(absl::Time now);
  // Drain(why) on every member; from then on Register refuses every stream
  // with `why`. Thread-safe.
  void DrainAll(const absl::Status& why);
  // Evict(why) on every member still registered (a drain that ran out of
  // time).
  void EvictAll(const absl::Status& why);

  int open_streams() const;
  uint64_t streams_opened() const;
  uint64_t streams_evicted() const;

 private:
  void ReaperLoop(absl::Duration period);
  // Every registered member, each with a reference the caller gives back.
  std::vector<Member*> RefMembers();

  const int max_streams_;
  const int max_per_peer_;
  const Clock clock_;
  mutable absl::Mutex mu_;
  std::unordered_set<Member*> members_ ABSL_GUARDED_BY(mu_);
  // Each address's members, oldest first (the eviction order).
  std::unordered_map<std::string, std::list<Member*>> per_peer_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status draining_ ABSL_GUARDED_BY(mu_);  // not ok once DrainAll was called
  absl::Notification stop_;
  std::thread reaper_;
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7"; "ipv6:[::1]:5000" -> "ipv6:[::1]".
// A peer string without a port is returned as it is.
std::string PeerAddress(const std::string& peer);

}  // namespace sophon

#endif  // SOPHON_SERVER_STREAM_REGISTRY_H_
