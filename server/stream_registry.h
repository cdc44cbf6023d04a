// The open Fetch streams of a server: admission by count (in all and per
// client address) and a reaper thread that asks every stream, once per
// period, whether it has been idle too long.
#ifndef SOPHON_SERVER_STREAM_REGISTRY_H_
#define SOPHON_SERVER_STREAM_REGISTRY_H_

#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/limit.h"

namespace sophon {

class StreamRegistry {
 public:
  // A registered stream. Ref/Unref keep it alive while the reaper calls it.
  class Member {
   public:
    virtual ~Member() = default;
    virtual void Ref() = 0;
    virtual void Unref() = 0;
    // Called from the reaper thread without the registry's lock held; the
    // member ends itself if it has been idle since before `now - timeout`.
    virtual void CheckIdle(absl::Time now) = 0;
  };

  // REQUIRES: max_streams >= 1, max_per_peer >= 1, check_period > 0.
  StreamRegistry(int max_streams, int max_per_peer, absl::Duration check_period);
  // Stops and joins the reaper. Members must have unregistered.
  ~StreamRegistry();

  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // Admits a stream from `peer` (a client address without its port).
  // RESOURCE_EXHAUSTED naming ServiceOptions.max_streams or
  // ServiceOptions.max_streams_per_peer when full. Thread-safe.
  // *limit (if not null) names the limit hit.
  absl::Status Register(const std::string& peer, Member* member, Limit* limit = nullptr);
  // REQUIRES: `member` was registered from `peer`.
  void Unregister(const std::string& peer, Member* member);

  int open_streams() const;
  uint64_t streams_opened() const;

 private:
  void ReaperLoop(absl::Duration period);

  const int max_streams_;
  const int max_per_peer_;
  mutable absl::Mutex mu_;
  std::unordered_set<Member*> members_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread reaper_;
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7"; "ipv6:[::1]:5000" -> "ipv6:[::1]".
// A peer string without a port is returned as it is.
std::string PeerAddress(const std::string& peer);

}  // namespace sophon

#endif  // SOPHON_SERVER_STREAM_REGISTRY_H_
