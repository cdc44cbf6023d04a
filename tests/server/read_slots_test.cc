#include "server/read_slots.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

class FakeMember : public ReadSlots::Member {
 public:
  void Ref() override { refs.fetch_add(1); }
  void Unref() override { refs.fetch_sub(1); }
  void OnSlotGranted() override {
    absl::MutexLock lock(&mu);
    ++grants;
    grant_thread = std::this_thread::get_id();
  }
  void OnSlotTaken(absl::Status why) override {
    absl::MutexLock lock(&mu);
    taken = std::move(why);
  }
  // Waits (up to 5 s) for OnSlotGranted.
  bool WaitGranted() {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(
                                   +[](FakeMember* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu) {
                                     return m->grants > 0;
                                   },
                                   this),
                               absl::Seconds(5));
  }
  int Grants() {
    absl::MutexLock lock(&mu);
    return grants;
  }
  absl::Status Taken() {
    absl::MutexLock lock(&mu);
    return taken;
  }

  std::atomic<int> refs{0};
  absl::Mutex mu;
  int grants ABSL_GUARDED_BY(mu) = 0;
  std::thread::id grant_thread ABSL_GUARDED_BY(mu);
  absl::Status taken ABSL_GUARDED_BY(mu);
};

class ReadSlotsTest : public ::testing::Test {
 protected:
  void Make(int slots, int per_peer, absl::Duration probation = absl::Hours(1)) {
    ReadSlots::Options o;
    o.slots = slots;
    o.max_per_peer = per_peer;
    o.probation = probation;
    slots_ = std::make_unique<ReadSlots>(o, [this] {
      absl::MutexLock lock(&clock_mu_);
      return now_;
    });
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&clock_mu_);
    now_ += d;
  }
  FakeMember* New() {
    members_.push_back(std::make_unique<FakeMember>());
    return members_.back().get();
  }
  // A member from `peer` that got a slot at once (and, if `active`, has
  // completed a request).
  // Members on connection `connection` of address `peer` ("a" and 1:
  // "a:1").
  FakeMember* Holder(const std::string& peer, bool active = true, int connection = 0) {
    FakeMember* m = New();
    EXPECT_TRUE(Acquire(peer, m, connection)) << peer;
    if (active) slots_->MessageCompleted(m);
    return m;
  }
  FakeMember* Waiter(const std::string& peer, int connection = 0) {
    FakeMember* m = New();
    EXPECT_FALSE(Acquire(peer, m, connection)) << peer;
    return m;
  }
  bool Acquire(const std::string& peer, FakeMember* m, int connection = 0) {
    return slots_->Acquire(peer, peer + ":" + std::to_string(connection), m);
  }
  // Releases every member (the slots must be empty before they go).
  void TearDown() override {
    for (auto& m : members_) slots_->Release(m.get());
    slots_.reset();
  }

  absl::Mutex clock_mu_;
  absl::Time now_ ABSL_GUARDED_BY(clock_mu_) = absl::FromUnixSeconds(1000);
  std::vector<std::unique_ptr<FakeMember>> members_;
  std::unique_ptr<ReadSlots> slots_;
};

TEST_F(ReadSlotsTest, SlotsAreCappedInAllAndPerAddress) {
  Make(/*slots=*/4, /*per_peer=*/2);
  Holder("a");
  Holder("a");
  FakeMember* a3 = Waiter("a");  // a's cap
  Holder("b");
  Holder("c");
  FakeMember* c2 = Waiter("c");  // the server's: nobody holds two more than c
  EXPECT_EQ(slots_->held(), 4);
  EXPECT_EQ(slots_->waiters(), 2);
  EXPECT_EQ(slots_->peer_held("a"), 2);
  EXPECT_EQ(slots_->peer_waiting("a"), 1);
  EXPECT_EQ(slots_->peer_waiting("c"), 1);
  EXPECT_FALSE(slots_->holds(a3));
  EXPECT_FALSE(slots_->holds(c2));
  EXPECT_EQ(slots_->taken(), 0u);
}

TEST_F(ReadSlotsTest, AFreedSlotIsGrantedOnTheNotifierThreadNotTheReleasingOne) {
  Make(1, 1);
  FakeMember* h = Holder("a");
  FakeMember* w = Waiter("a");
  EXPECT_FALSE(slots_->Release(h)) << "a holder was not queued";
  ASSERT_TRUE(w->WaitGranted());
  EXPECT_TRUE(slots_->holds(w));
  absl::MutexLock lock(&w->mu);
  EXPECT_NE(w->grant_thread, std::this_thread::get_id());
  EXPECT_EQ(w->grants, 1);
}

TEST_F(ReadSlotsTest, ReleaseGivesBackAQueuedPlaceOrASlotOnce) {
  Make(1, 1);
  FakeMember* h = Holder("a");
  FakeMember* w = Waiter("a");
  EXPECT_TRUE(slots_->Release(w)) << "queued: no grant will come";
  EXPECT_FALSE(slots_->Release(w)) << "twice: nothing left to give back";
  EXPECT_EQ(slots_->waiters(), 0);
  EXPECT_FALSE(slots_->Release(h));
  EXPECT_FALSE(slots_->Release(h));
  EXPECT_EQ(slots_->held(), 0);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(w->Grants(), 0) << "a released waiter is never granted";
  // Nothing is left of either address: a new one gets a slot at once.
  FakeMember* n = New();
  EXPECT_TRUE(Acquire("a", n));
}

TEST_F(ReadSlotsTest, AnAddressHoldingFewerSlotsIsGrantedFirst) {
  Make(4, 4);
  Holder("a");
  Holder("a");
  FakeMember* b1 = Holder("b");
  FakeMember* c1 = Holder("c");
  // Full, and nobody holds two more than another: everyone queues.
  FakeMember* a3 = Waiter("a");
  FakeMember* b2 = Waiter("b");
  // c's slot goes to b (1 held), not to a (2 held) whose waiter came first.
  slots_->Release(c1);
  ASSERT_TRUE(b2->WaitGranted());
  EXPECT_EQ(a3->Grants(), 0);
  slots_->MessageCompleted(b2);
  slots_->Release(b1);
  ASSERT_TRUE(a3->WaitGranted()) << "the only waiter left";
}

TEST_F(ReadSlotsTest, BetweenEqualAddressesTheEarliestWaiterGoesFirst) {
  Make(3, 3);
  Holder("a");
  Holder("b");
  FakeMember* c1 = Holder("c");
  FakeMember* b2 = Waiter("b");
  FakeMember* a2 = Waiter("a");
  slots_->Release(c1);
  ASSERT_TRUE(b2->WaitGranted());
  EXPECT_EQ(a2->Grants(), 0);
}

TEST_F(ReadSlotsTest, AnAddressWhoseHoldersSentNoRequestGoesAfterOneWhoseHoldersDid) {
  Make(4, 4);
  Holder("busy");
  Holder("busy");
  FakeMember* busy3 = Holder("busy");
  FakeMember* idle1 = Holder("idle", /*active=*/false);
  FakeMember* idle2 = Waiter("idle");
  FakeMember* busy4 = Waiter("busy");
  // Both without a holder that sent nothing: the fewer slots first.
  slots_->Release(idle1);
  ASSERT_TRUE(idle2->WaitGranted());
  EXPECT_EQ(busy4->Grants(), 0);
  // idle's new holder has sent nothing yet: busy's waiter now goes first,
  // although busy holds two more.
  FakeMember* idle3 = Waiter("idle");
  slots_->Release(busy3);
  ASSERT_TRUE(busy4->WaitGranted());
  EXPECT_EQ(idle3->Grants(), 0);
}

TEST_F(ReadSlotsTest, WithinAnAddressAConnectionThatUsesItsSlotsGoesFirst) {
  Make(3, 3);
  Holder("a", /*active=*/false, 1);  // a stream never read
  Holder("a", /*active=*/true, 2);   // a trainer's
  FakeMember* other = Holder("a", /*active=*/true, 4);
  FakeMember* backlog = Waiter("a", 1);
  FakeMember* trainer = Waiter("a", 2);
  slots_->Release(other);
  ASSERT_TRUE(trainer->WaitGranted()) << "before the backlog, which came first";
  EXPECT_EQ(backlog->Grants(), 0);
}

TEST_F(ReadSlotsTest, AStreamOnAConnectionHoldingTwoFewerTakesAQuietSlotOfItsAddress) {
  Make(3, 3);
  // One connection holds every slot of the address with streams never read
  // (within their probation); a trainer's next stream comes on its own.
  FakeMember* q1 = Holder("a", /*active=*/false, 1);
  Advance(absl::Milliseconds(10));
  FakeMember* q2 = Holder("a", /*active=*/false, 1);
  Holder("a", /*active=*/false, 1);
  FakeMember* trainer = New();
  EXPECT_TRUE(Acquire("a", trainer, 2));
  EXPECT_FALSE(q1->Taken().ok()) << "the quiet stream that got its slot first";
  EXPECT_TRUE(q2->Taken().ok());
  EXPECT_NE(q1->Taken().message().find("on a connection holding fewer slots"), std::string::npos)
      << q1->Taken();
  // The trainer's connection holds one now, the other two: within one.
  Waiter("a", 2);
  EXPECT_EQ(slots_->taken(), 1u);
}

TEST_F(ReadSlotsTest, WithinAConnectionTheOldestWaiterGoesFirst) {
  Make(1, 1);
  FakeMember* h = Holder("a");
  FakeMember* w1 = Waiter("a");
  FakeMember* w2 = Waiter("a");
  slots_->Release(h);
  ASSERT_TRUE(w1->WaitGranted());
  slots_->Release(w1);
  ASSERT_TRUE(w2->WaitGranted());
}

TEST_F(ReadSlotsTest, AnArrivalTakesTheSlotOfAHolderThatSentNoRequestPastItsProbation) {
  Make(4, 2, /*probation=*/absl::Seconds(1));
  FakeMember* quiet = Holder("a", /*active=*/false);
  FakeMember* active = Holder("a");
  Advance(absl::Milliseconds(500));
  Waiter("a");  // within its probation: nothing is taken
  EXPECT_TRUE(quiet->Taken().ok());
  Advance(absl::Milliseconds(600));
  FakeMember* late = New();
  EXPECT_TRUE(Acquire("a", late)) << "takes the quiet holder's slot";
  EXPECT_TRUE(slots_->holds(late));
  EXPECT_FALSE(slots_->holds(quiet));
  EXPECT_TRUE(slots_->holds(active)) << "a holder that sent a request keeps its slot";
  const absl::Status why = quiet->Taken();
  EXPECT_EQ(why.code(), absl::StatusCode::kResourceExhausted) << why;
  EXPECT_NE(why.message().find("max_reading_streams_per_peer = 2"), std::string::npos) << why;
  EXPECT_NE(why.message().find("no complete request"), std::string::npos) << why;
  EXPECT_EQ(quiet->refs.load(), 0) << "its reference was given back";
  EXPECT_EQ(slots_->taken(), 1u);
  EXPECT_FALSE(slots_->Release(quiet)) << "a taken slot is not given back twice";
  EXPECT_EQ(slots_->peer_held("a"), 2);
  // The next arrival finds none to take.
  Waiter("a");
}

TEST_F(ReadSlotsTest, OnAFullServerAnArrivalTakesAQuietHolderFromAnyAddress) {
  Make(2, 2, absl::Seconds(1));
  FakeMember* other = Holder("b", /*active=*/false);
  Holder("a");
  Advance(absl::Seconds(2));
  FakeMember* a2 = New();
  EXPECT_TRUE(Acquire("a", a2));
  EXPECT_FALSE(other->Taken().ok());
  EXPECT_NE(other->Taken().message().find("read slots are all in use"), std::string::npos)
      << other->Taken();
}

TEST_F(ReadSlotsTest, OnAFullServerTheLargestHolderGivesUpAQuietStreamFirst) {
  Make(4, 4);
  FakeMember* a1 = Holder("a");
  FakeMember* a2 = Holder("a", /*active=*/false);
  FakeMember* a3 = Holder("a");
  Holder("b");
  // c holds 0, a holds 3 >= 0 + 2: a gives one up, the one without a request.
  FakeMember* c = New();
  EXPECT_TRUE(Acquire("c", c));
  EXPECT_FALSE(a2->Taken().ok());
  EXPECT_TRUE(a1->Taken().ok());
  EXPECT_TRUE(a3->Taken().ok());
  EXPECT_NE(a2->Taken().message().find("read slots are all in use"), std::string::npos);
  // a 2, b 1, c 1: nobody holds two more than d's 0... a does.
  Advance(absl::Seconds(1));
  slots_->MessageCompleted(a3);  // a1's last request is now the oldest
  FakeMember* d = New();
  EXPECT_TRUE(Acquire("d", d));
  EXPECT_FALSE(a1->Taken().ok()) << "the least recently active";
  EXPECT_TRUE(a3->Taken().ok());
  EXPECT_NE(a1->Taken().message().find("client a held the most"), std::string::npos)
      << a1->Taken();
  // Everyone holds 1 now: the next address waits.
  Waiter("e");
  EXPECT_EQ(slots_->taken(), 2u);
}

TEST_F(ReadSlotsTest, AnAddressWithQuietHoldersTakesNothingFromOneThatUsesItsSlots) {
  Make(5, 5);
  for (int i = 0; i < 4; ++i) Holder("busy");
  Holder("idle", /*active=*/false);
  // busy holds 4 >= 1 + 2, but idle's holder sits on its slot.
  Waiter("idle");
  EXPECT_EQ(slots_->taken(), 0u);
}

TEST_F(ReadSlotsTest, ContendedWhenAWaiterCouldTakeTheSlot) {
  Make(4, 2);
  FakeMember* a1 = Holder("a");
  FakeMember* a2 = Holder("a");
  FakeMember* b1 = Holder("b", /*active=*/false);
  EXPECT_FALSE(slots_->Contended(a1)) << "nobody waits";
  FakeMember* a3 = Waiter("a");
  EXPECT_TRUE(slots_->Contended(a1)) << "a waiter of its own address";
  EXPECT_FALSE(slots_->Contended(b1)) << "a's waiter is held back by a's own cap";
  EXPECT_FALSE(slots_->Contended(a3)) << "a waiter holds no slot";
  slots_->Release(a3);
  // Full, with a waiter from an address under its cap.
  Holder("c");
  FakeMember* c2 = Waiter("c");  // c 1, a 2: not two fewer
  EXPECT_TRUE(slots_->Contended(b1)) << "a holder without a request yields to any waiter";
  EXPECT_FALSE(slots_->Contended(a2)) << "an active holder only to an address with 2 fewer";
  slots_->Release(c2);
  EXPECT_FALSE(slots_->Contended(b1));
}

TEST_F(ReadSlotsTest, ARequestCompletedEndsAHoldersProbation) {
  Make(1, 1, absl::Seconds(1));
  FakeMember* h = Holder("a", /*active=*/false);
  slots_->MessageCompleted(h);
  Advance(absl::Seconds(10));
  Waiter("a");
  EXPECT_TRUE(h->Taken().ok());
  EXPECT_TRUE(slots_->holds(h));
}

TEST_F(ReadSlotsTest, ManyThreadsAcquireAndReleaseAndTheCountsComeBackToZero) {
  Make(8, 3);
  constexpr int kThreads = 8;
  constexpr int kRounds = 300;
  std::vector<std::vector<std::unique_ptr<FakeMember>>> mine(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string peer = "p" + std::to_string(t % 4);
      for (int r = 0; r < kRounds; ++r) {
        mine[t].push_back(std::make_unique<FakeMember>());
        FakeMember* m = mine[t].back().get();
        if (!slots_->Acquire(peer, peer + ":" + std::to_string(t), m)) {
          if (r % 2 == 0) {
            slots_->Release(m);  // gives up waiting (or its slot, if granted meanwhile)
            continue;
          }
          ASSERT_TRUE(m->WaitGranted());
        }
        if (r % 3 == 0) slots_->MessageCompleted(m);
        slots_->Release(m);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(slots_->held(), 0);
  EXPECT_EQ(slots_->waiters(), 0);
  slots_.reset();  // delivers what is left before the members go
}

}  // namespace
}  // namespace sophon
