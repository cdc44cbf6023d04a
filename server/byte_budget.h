// Admission by bytes across all streams: a counter of reserved bytes with a
// capacity, and a list of waiters to wake when bytes are released. Streams
// reserve a sample's output size before its work starts and release it once
// the sample is written; a stream that does not fit waits without a thread.
#ifndef SOPHON_SERVER_BYTE_BUDGET_H_
#define SOPHON_SERVER_BYTE_BUDGET_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace sophon {

class ByteBudget {
 public:
  // Something that waits for bytes. Woken at most once per registration.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // Called without the budget's lock held, in the thread that released
    // bytes. The waiter may try again (and wait again).
    virtual void OnBytesReleased() = 0;
  };

  // Told when the bytes in use go from 0 to more (true) and back to 0
  // (false), under the budget's lock: it must be quick and must not call
  // back into the budget.
  using TransitionFn = std::function<void(bool busy)>;

  // REQUIRES: capacity >= 1.
  explicit ByteBudget(int64_t capacity, TransitionFn on_transition = nullptr)
      : capacity_(capacity), on_transition_(std::move(on_transition)) {}

  // Reserves `bytes` if they fit, else registers `waiter` (if not null) to be
  // woken by the next Release and returns false; *registered (if not null)
  // tells whether this call added the waiter (false if it was already
  // waiting), so that callers can hold one reference per registration.
  // Atomic, so a release between the attempt and the registration cannot be
  // missed. Thread-safe.
  bool TryAcquireOrWait(int64_t bytes, Waiter* waiter, bool* registered = nullptr);
  // Reserves unconditionally (used when a sample turned out larger than its
  // estimate); may take the budget above capacity for a moment.
  void ForceAcquire(int64_t bytes);
  // Returns bytes and wakes every registered waiter (outside the lock).
  void Release(int64_t bytes);
  // Unregisters `waiter`; true if it was registered (and so will not be woken).
  bool RemoveWaiter(Waiter* waiter);

  int64_t capacity() const { return capacity_; }
  int64_t used() const;
  int waiters() const;

 private:
  void AddLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t capacity_;
  const TransitionFn on_transition_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sophon

#endif  // SOPHON_SERVER_BYTE_BUDGET_H_
