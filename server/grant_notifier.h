// The notifier thread of an admission queue (ByteBudget, ReadSlots): grants
// made under the queue's lock are handed to this thread, which tells their
// waiters in the order they were made, never on the thread that made them
// and without the queue's lock held (a waiter may call back into the queue).
#ifndef SOPHON_SERVER_GRANT_NOTIFIER_H_
#define SOPHON_SERVER_GRANT_NOTIFIER_H_

#include <pthread.h>

#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sophon {

template <typename Grant>
class GrantNotifier {
 public:
  // Called on the notifier thread once per grant.
  using TellFn = std::function<void(const Grant&)>;

  // Starts the thread, named `thread_name` (at most 15 characters).
  GrantNotifier(const char* thread_name, TellFn tell) : tell_(std::move(tell)) {
    thread_ = std::thread([this] { Loop(); });
    pthread_setname_np(thread_.native_handle(), thread_name);
  }
  // Tells the grants already handed over, then joins the thread. An owner
  // declares its notifier last, so that it stops before the rest of the
  // owner is destroyed.
  ~GrantNotifier() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  GrantNotifier(const GrantNotifier&) = delete;
  GrantNotifier& operator=(const GrantNotifier&) = delete;

  // Queues `grants` for the thread, in order. Thread-safe.
  void Deliver(const std::vector<Grant>& grants) {
    if (grants.empty()) return;
    absl::MutexLock lock(&mu_);
    for (const Grant& g : grants) to_deliver_.push_back(g);
  }

 private:
  void Loop() {
    while (true) {
      Grant grant;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](GrantNotifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
              return n->stopping_ || !n->to_deliver_.empty();
            },
            this));
        if (to_deliver_.empty()) return;  // stopping, and every grant told
        grant = to_deliver_.front();
        to_deliver_.pop_front();
      }
      tell_(grant);
    }
  }

  const TellFn tell_;
  absl::Mutex mu_;
  std::deque<Grant> to_deliver_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_GRANT_NOTIFIER_H_
