// The unary calls (manifest, pages, paths, stats, health) a server is
// answering, counted per client address. A call is counted from when the
// service admits it until gRPC is done with it, which includes the time its
// answer waits for a client that does not take it: a client that never reads
// its answers holds at most max_per_peer of them, and the server at most
// max_calls.
//
// The server's max_calls are shared max-min fairly: an address may hold at
// most its share, max_calls / (the addresses with calls held or waiting + 1),
// and never more than max_per_peer; the + 1 keeps a share free for an
// address that comes next, so that clients that hold their calls from many
// addresses cannot take every slot from a trainer that asks later.
//
// A call over its address's cap or the server's waits, in arrival order per
// address, for a slot: a freed slot goes to the waiting address with the
// fewest calls among those under their cap. Its request is not read
// meanwhile. A client that never takes its answers thus finds its
// later calls held, not refused: its connections' streams stay taken
// (max_calls_per_connection each) and it cannot send more, where a refusal at
// once would free the stream for the next call at tens of microseconds of
// the server's CPU each. At most max_waiting calls wait; one more is refused
// at once; one that waits wait_timeout is refused (RESOURCE_EXHAUSTED naming
// the limit it waited on) by the class's thread, which sleeps while none
// waits: one thread for every waiting call, no timer each.
#ifndef SOPHON_SERVER_UNARY_CALLS_H_
#define SOPHON_SERVER_UNARY_CALLS_H_

#include <functional>
#include <list>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/limit.h"

namespace sophon {

class UnaryCalls {
 public:
  // A call waiting for a slot: exactly one of its two calls comes, outside
  // the lock, unless StopWaiting took it out first. Admitted() once it has
  // one (counted already, to be released with Release), on the thread whose
  // Release freed the slot; WaitTimedOut(status, limit) once it has waited
  // wait_timeout (not counted), on the class's thread.
  class Waiter {
   public:
    virtual void Admitted() = 0;
    virtual void WaitTimedOut(const absl::Status& status, Limit limit) = 0;

   protected:
    ~Waiter() = default;

   private:
    friend class UnaryCalls;
    std::list<Waiter*>::iterator pos_;      // in its address's queue
    std::list<Waiter*>::iterator all_pos_;  // in all_waiting_
    const std::string* peer_ = nullptr;     // its address's key in peers_
    absl::Time deadline_;
    bool queued_ = false;
  };

  enum class Admission { kAdmitted, kWaiting, kRefused };

  // Told true when the first call starts and false when the last one ends
  // (outside the lock; for the memory releaser).
  using BusyFn = std::function<void(bool busy)>;
  // REQUIRES: max_calls >= 1, max_per_peer >= 1, max_waiting >= 0,
  // wait_timeout > 0.
  UnaryCalls(int max_calls, int max_per_peer, int max_waiting = 0,
             absl::Duration wait_timeout = absl::Seconds(30), BusyFn on_busy = nullptr);
  // Joins the thread. REQUIRES: no call waits.
  ~UnaryCalls();

  // Counts a call from `peer` (a client address without its port;
  // kAdmitted), or queues `waiter` (kWaiting:
  // *limit and *status say which limit it waits on, the status to end it
  // with if it waits too long), or refuses it when max_waiting calls wait
  // already (kRefused: *limit, *status). An address with calls waiting
  // queues its next one behind them. Thread-safe.
  Admission AdmitOrWait(const std::string& peer, Waiter* waiter, Limit* limit,
                        absl::Status* status);
  // Takes `waiter` out of `peer`'s queue: true if it was still waiting (it
  // will not be admitted), false if it was admitted or taken out already.
  bool StopWaiting(const std::string& peer, Waiter* waiter);
  // REQUIRES: a call admitted from `peer` (by AdmitOrWait, or Admitted). May admit a waiting call (its Admitted() runs here).
  void Release(const std::string& peer);

  int inflight() const;
  int inflight(const std::string& peer) const;
  int waiting() const;

 private:
  struct Peer {
    int calls = 0;
    std::list<Waiter*> waiting;
  };

  // What an address may hold now: max_per_peer, or its share of max_calls
  // if that is less.
  int Cap() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `p` may take one more call now.
  bool MayTake(const Peer& p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal for a call from `peer` (which has `mine` calls) over a limit.
  absl::Status LimitStatus(const std::string& peer, int mine, Limit* limit) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AdmitOrWait's call that cannot be admitted now: queued, or refused.
  Admission Queue(const std::string& peer, Peer& p, Waiter* waiter, Limit* limit,
                  absl::Status* status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the first waiter of `p` and counts it. REQUIRES: one waits.
  Waiter* AdmitFirst(Peer& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `w` out of both queues. REQUIRES: queued.
  void Unqueue(Peer& p, Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The thread: refuses the calls that waited wait_timeout.
  void ExpireLoop();
  void EraseIfIdle(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_calls_;
  const int max_per_peer_;
  const int max_waiting_;
  const absl::Duration wait_timeout_;
  const BusyFn on_busy_;
  mutable absl::Mutex mu_;
  absl::CondVar waiters_changed_;  // the first waiter, or stop_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Every waiting call, oldest (first to time out) first.
  std::list<Waiter*> all_waiting_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Every address with calls held or waiting.
  std::unordered_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::thread expirer_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_UNARY_CALLS_H_
