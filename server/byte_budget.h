// Admission by bytes across all streams, fair across client addresses.
//
// Streams reserve a sample's output size before its work starts and release
// it once the sample is written. What does not fit waits in one FIFO queue
// without a thread; a release grants bytes to waiters (reserving them on the
// waiter's behalf, so a woken waiter never finds its bytes gone) and tells
// them on the budget's own notifier thread, never on the releasing thread.
//
// Order of admission, when bytes are scarce:
// - Max-min fairness across addresses: a waiter whose address holds less
//   than its fair share (capacity / addresses holding or waiting) goes
//   before waiters whose address holds more; among equals, first come first
//   served.
// - The head waiter's reservation: the first waiter in that order that does
//   not fit stops every waiter behind it, so a large sample is not starved by
//   a steady flow of small ones.
// - Kept shares: an address with a stream open (Join) keeps the part of its
//   fair share it does not hold. Others are admitted only from what is left
//   beyond those parts, so a client that takes bytes and never lets them go
//   (it never reads), from one address or many, cannot leave an open
//   stream of another address waiting for them: that one always finds its
//   share. While streams are open, one more share is kept for an address
//   that has none yet, so a client that connects after such a hog filled
//   the rest is not left waiting either. A waiter held back only by others'
//   kept shares stops nobody drawing on their own.
// - A backstop: one address never holds more than max_peer_bytes (unless it
//   holds nothing: one sample always fits an address's empty share); its
//   first waiter that does not fit waits for the address's own releases,
//   with the address's later waiters behind it, and holds up no other
//   address.
#ifndef SOPHON_SERVER_BYTE_BUDGET_H_
#define SOPHON_SERVER_BYTE_BUDGET_H_

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/grant_notifier.h"

namespace sophon {

class ByteBudget {
 public:
  // Something that waits for bytes.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // The `bytes` this waiter asked for are now reserved for it (it must
    // Release them, or use them and release them later). Called exactly once
    // per Acquire that returned false and was not cancelled, on the budget's
    // notifier thread, without the budget's lock held.
    virtual void OnBytesGranted(int64_t bytes) = 0;
  };

  struct Options {
    int64_t capacity = 1;        // bytes in all; >= 1
    int64_t max_peer_bytes = 1;  // bytes one address may hold; in [1, capacity]
    // Below this many bytes in use the budget counts as quiet (see
    // TransitionFn); 0 = quiet only when nothing is in use.
    int64_t quiet_bytes = 0;
  };

  // Told when the bytes in use rise above Options.quiet_bytes (busy = true)
  // and when they fall back to it or below (busy = false), under the
  // budget's lock: it must be quick and must not call back into the budget.
  using TransitionFn = std::function<void(bool busy)>;

  explicit ByteBudget(const Options& options, TransitionFn on_transition = nullptr);
  // Delivers the grants already made, then joins the notifier thread.
  ~ByteBudget();

  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Reserves `bytes` for address `peer` and returns true if they fit now and
  // no earlier waiter has a claim on them; otherwise queues `waiter` and
  // returns false (OnBytesGranted follows, unless Cancel removes it first).
  // REQUIRES: bytes >= 0; `waiter` is not queued already. Thread-safe.
  bool Acquire(const std::string& peer, int64_t bytes, Waiter* waiter);
  // Returns bytes that `peer` reserved; grants bytes to the waiters that now
  // fit. Thread-safe; never calls a waiter on this thread.
  void Release(const std::string& peer, int64_t bytes);
  // A stream of address `peer` opened (Join) or ended (Leave): while an
  // address has one open, the part of its fair share it does not hold is
  // kept for it. Thread-safe.
  void Join(const std::string& peer);
  void Leave(const std::string& peer);
  // Removes a queued waiter: true if it was queued (no grant will come for
  // it); false if it was not (a grant made before may still be delivered).
  bool Cancel(Waiter* waiter);

  int64_t capacity() const { return options_.capacity; }
  int64_t max_peer_bytes() const { return options_.max_peer_bytes; }
  int64_t used() const;
  // The most bytes ever in use at once.
  int64_t peak() const;
  int waiters() const;
  // Bytes that address `peer` holds now.
  int64_t peer_used(const std::string& peer) const;
  // Grants made to queued waiters (each one a wake-up of exactly one waiter).
  uint64_t grants() const;

 private:
  struct Queued {
    Waiter* waiter;
    std::string peer;
    int64_t bytes;
  };
  struct Peer {
    int64_t held = 0;
    int waiting = 0;
    int streams = 0;  // open streams (Join - Leave)
  };
  struct Grant {
    Waiter* waiter;
    int64_t bytes;
  };

  // Reserves for the waiters that fit, in admission order; appends them to
  // `grants`.
  void GrantLocked(std::vector<Grant>* grants) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddLocked(Peer& peer, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PeerAllowsLocked(const Peer& peer, int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `bytes` for `peer` fit: in an empty budget anything does; else
  // within the capacity less the shares the other addresses keep.
  bool FitsLocked(const Peer& peer, int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The part of its fair share `peer` keeps (it has a stream open and holds
  // less than the share).
  int64_t KeptLocked(const Peer& peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The peer named `name`, created if new (the fair share then changes).
  Peer& PeerLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes the fair share and kept_ after the set of addresses changed.
  void RecountLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetIfEmptyLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const TransitionFn on_transition_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t grants_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Queued> queue_ ABSL_GUARDED_BY(mu_);  // FIFO
  // Holding, waiting or with a stream open.
  std::unordered_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;    // open streams of every address
  // capacity / (addresses in peers_, and a newcomer while streams are open)
  int64_t share_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kept_ ABSL_GUARDED_BY(mu_) = 0;   // the sum of KeptLocked over peers_

  GrantNotifier<Grant> notifier_{
      "sophon-budget", [](const Grant& g) { g.waiter->OnBytesGranted(g.bytes); }};  // last
};

}  // namespace sophon

#endif  // SOPHON_SERVER_BYTE_BUDGET_H_
