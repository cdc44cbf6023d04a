// Read slots: how many Fetch streams may have a request read outstanding at
// once, in all and per client address.
//
// Why: gRPC (1.51) grows a stream's receive window to cover the rest of an
// announced request message only while the service has a read pending on
// it, and checks the message's size only once all of it has arrived; a
// stream with no read pending holds at most its initial window. So the bytes
// half-sent requests can pin are bounded by the streams that may read, not by
// the streams that are open. A stream takes a slot before its first read and
// keeps it for its life (a trainer does not queue for a slot before every
// request); it gives it back once it will read no more (the client
// half-closed, the stream failed or drains, or it ended).
//
// Order, when slots are scarce (no thread per waiter; grants are told on the
// slots' own notifier thread, never on the thread that freed the slot):
// - An address ranks by (its holders that have not completed a request
//   message yet, its holders): a waiter from the lowest-ranked address under
//   its cap goes first, so addresses whose streams use their slots go before
//   addresses whose streams sit on them, and among those max-min fairly;
//   between equal addresses, the earliest waiter.
// - Within an address, the same between its connections (a client
//   process's channel): the waiter whose connection ranks lowest goes first,
//   the oldest among equals. A trainer's next stream, on a connection that
//   holds nothing once its last stream is done, does not queue behind a
//   backlog of streams that have never been read on connections that hold
//   slots already.
// - A stream arriving with no slot free takes one at once from a holder
//   that has completed no request `probation` after getting its slot (from
//   its own address when it is at its cap, from any when the server is
//   full); else, max-min, from the address (the server full) or the
//   connection of its own address (the address at its cap) that ranks
//   highest among those holding at least two slots more than its own and at
//   least as many holders without a request: a holder without a request
//   first, else the one whose last request is oldest. The holder loses its
//   stream.
// - Contended(): whether a waiter would take a holder's slot were it
//   released; the reaper ends holders whose read has stalled only then.
#ifndef SOPHON_SERVER_READ_SLOTS_H_
#define SOPHON_SERVER_READ_SLOTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/counted_member.h"
#include "server/grant_notifier.h"

namespace sophon {

class ReadSlots {
 public:
  // A stream that reads requests.
  // A queued member stays alive until OnSlotGranted, or a Release that
  // returns true, has been called (it holds a reference of its own for that).
  // Ref/Unref keep the member alive while OnSlotTaken is called.
  class Member : public CountedMember {
   public:
    // The slot this member waited for is now its own. Called exactly once
    // per Acquire that returned false and whose member was not released
    // before the grant, on the notifier thread, without the slots' lock held.
    virtual void OnSlotGranted() = 0;
    // The member's slot went to another stream: it must end itself with
    // `why` (its read is still pending). Called on the thread of the Acquire
    // that took it, without the slots' lock held.
    virtual void OnSlotTaken(absl::Status why) = 0;
  };

  struct Options {
    int slots = 1;         // in all; >= 1
    int max_per_peer = 1;  // per client address; in [1, slots]
    // How long after getting its slot a holder that has completed no
    // request can be made to give it up to a stream arriving.
    absl::Duration probation = absl::Seconds(1);
  };
  using Clock = std::function<absl::Time()>;

  // `clock` (absl::Now if empty) times the slots held.
  explicit ReadSlots(const Options& options, Clock clock = nullptr);
  // Delivers the grants already made, then joins the notifier thread.
  ~ReadSlots();

  ReadSlots(const ReadSlots&) = delete;
  ReadSlots& operator=(const ReadSlots&) = delete;

  // Gives `member` (from client address `peer`) a slot and returns true, if
  // one is free or can be taken (see the order above); otherwise queues it
  // and returns false (OnSlotGranted follows unless Release comes first).
  // REQUIRES: `member` holds no slot and is not queued. Thread-safe.
  // `connection` names the member's connection (the peer with its port).
  bool Acquire(const std::string& peer, const std::string& connection, Member* member);
  // The holder `member` completed a request message.
  void MessageCompleted(Member* member);
  // Gives back `member`'s slot or its place in the queue. True if it was
  // queued (no grant will come for it); false otherwise (it held a slot,
  // held none, or a grant made before may still be delivered). Never calls a
  // member on this thread. Thread-safe.
  bool Release(Member* member);
  // Whether a waiter would take `member`'s slot were it released: a waiter
  // from its address, or (the server full) one from an address under its
  // cap — for a holder that has completed a request, only from an address
  // holding at least two slots fewer and no more holders without a request.
  // False when `member` holds no slot.
  bool Contended(Member* member) const;

  int capacity() const { return options_.slots; }
  int max_per_peer() const { return options_.max_per_peer; }
  int held() const;
  int waiters() const;
  int peer_held(const std::string& peer) const;
  int peer_waiting(const std::string& peer) const;
  bool holds(Member* member) const;
  // Slots taken from holders by streams arriving.
  uint64_t taken() const;

 private:
  struct Holder {
    std::string peer;
    std::string connection;
    absl::Time granted;
    absl::Time last_message;  // InfinitePast until the first
    bool has_message = false;
  };
  struct Waiter {
    Member* member;
    uint64_t seq;  // arrival order
    std::string connection;
  };
  struct Count {  // of an address or a connection
    int held = 0;
    int newcomers = 0;  // holders without a complete request
  };
  struct Peer : Count {
    std::unordered_map<std::string, Count> connections;  // those holding slots
    std::deque<Waiter> waiting;  // oldest first
  };
  struct Taken {
    Member* member;
    absl::Status why;
  };

  // An address's rank: lower goes first.
  static bool RanksBelow(const Count& a, const Count& b);
  void HoldLocked(const std::string& peer, const std::string& connection, Member* member)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a holder.
  void UnholdLocked(std::unordered_map<Member*, Holder>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A holder `peer`'s arriving stream may take, or holders_.end().
  std::unordered_map<Member*, Holder>::iterator VictimLocked(const std::string& peer,
                                                            const std::string& connection)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grants free slots to waiters in order; appends them to `granted`.
  void GrantLocked(std::vector<Member*>* granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetIfEmptyLocked(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock clock_;
  mutable absl::Mutex mu_;
  std::unordered_map<Member*, Holder> holders_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<Member*, std::string> waiting_ ABSL_GUARDED_BY(mu_);  // member -> address
  std::unordered_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);  // holding or waiting
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t taken_ ABSL_GUARDED_BY(mu_) = 0;

  GrantNotifier<Member*> notifier_{"sophon-slots",
                                   [](Member* const& m) { m->OnSlotGranted(); }};  // last
};

}  // namespace sophon

#endif  // SOPHON_SERVER_READ_SLOTS_H_
