// The unary calls (manifest, pages, paths, stats) a server is answering,
// counted per client address. A call is counted from when the service sees
// it until gRPC is done with it, which includes the time its answer waits
// for a client that does not take it: a client that never reads its answers
// holds at most max_per_peer of them, and the server at most max_calls.
#ifndef SOPHON_SERVER_UNARY_CALLS_H_
#define SOPHON_SERVER_UNARY_CALLS_H_

#include <functional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/limit.h"

namespace sophon {

class UnaryCalls {
 public:
  // Told true when the first call starts and false when the last one ends
  // (outside the lock; for the memory releaser).
  using BusyFn = std::function<void(bool busy)>;
  // REQUIRES: max_calls >= 1, max_per_peer >= 1.
  UnaryCalls(int max_calls, int max_per_peer, BusyFn on_busy = nullptr);

  // Counts a call from `peer` (a client address without its port), or
  // refuses it with RESOURCE_EXHAUSTED naming the limit (and *limit).
  // Thread-safe.
  absl::Status Admit(const std::string& peer, Limit* limit);
  // REQUIRES: a call admitted from `peer`.
  void Release(const std::string& peer);

  int inflight() const;
  int inflight(const std::string& peer) const;

 private:
  const int max_calls_;
  const int max_per_peer_;
  const BusyFn on_busy_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sophon

#endif  // SOPHON_SERVER_UNARY_CALLS_H_
