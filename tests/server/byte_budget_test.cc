#include "server/byte_budget.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

// Records its grants; the test waits for them with AwaitGrants.
struct RecordingWaiter : ByteBudget::Waiter {
  void OnBytesGranted(int64_t bytes) override {
    absl::MutexLock lock(&mu);
    granted += bytes;
    ++grants;
    thread = std::this_thread::get_id();
    order->push_back(name);
  }
  void AwaitGrants(int n) {
    absl::MutexLock lock(&mu);
    wanted = n;
    mu.Await(absl::Condition(
        +[](RecordingWaiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu) {
          return w->grants >= w->wanted;
        },
        this));
  }
  int Grants() {
    absl::MutexLock lock(&mu);
    return grants;
  }
  absl::Mutex mu;
  int64_t granted ABSL_GUARDED_BY(mu) = 0;
  int grants ABSL_GUARDED_BY(mu) = 0;
  int wanted ABSL_GUARDED_BY(mu) = 0;
  std::thread::id thread ABSL_GUARDED_BY(mu);
  std::string name;
  std::vector<std::string>* order = nullptr;  // guarded by the test's single notifier thread
};

ByteBudget::Options Opts(int64_t capacity, int64_t per_peer = -1) {
  ByteBudget::Options o;
  o.capacity = capacity;
  o.max_peer_bytes = per_peer < 0 ? capacity : per_peer;
  return o;
}

class ByteBudgetTest : public ::testing::Test {
 protected:
  RecordingWaiter* NewWaiter(const std::string& name) {
    waiters_.push_back(std::make_unique<RecordingWaiter>());
    waiters_.back()->name = name;
    waiters_.back()->order = &order_;
    return waiters_.back().get();
  }
  std::vector<std::unique_ptr<RecordingWaiter>> waiters_;
  std::vector<std::string> order_;
};

TEST_F(ByteBudgetTest, AGrantReservesForTheWaiterAndWakesItOnAnotherThread) {
  ByteBudget budget(Opts(100));
  RecordingWaiter* w = NewWaiter("w");
  EXPECT_TRUE(budget.Acquire("a", 60, w));
  EXPECT_FALSE(budget.Acquire("b", 50, w));
  EXPECT_EQ(budget.waiters(), 1);
  EXPECT_EQ(budget.used(), 60);
  budget.Release("a", 60);
  w->AwaitGrants(1);
  // The bytes were reserved on the waiter's behalf before it was told.
  EXPECT_EQ(budget.used(), 50);
  EXPECT_EQ(budget.peer_used("b"), 50);
  EXPECT_EQ(budget.waiters(), 0);
  EXPECT_EQ(budget.grants(), 1u);
  absl::MutexLock lock(&w->mu);
  EXPECT_EQ(w->granted, 50);
  EXPECT_NE(w->thread, std::this_thread::get_id());  // never on the releasing thread
}

TEST_F(ByteBudgetTest, TheHeadWaitersReservationHoldsBackSmallerRequestsThatWouldFit) {
  ByteBudget budget(Opts(100));
  RecordingWaiter* big = NewWaiter("big");
  RecordingWaiter* small = NewWaiter("small");
  ASSERT_TRUE(budget.Acquire("a", 90, nullptr));
  EXPECT_FALSE(budget.Acquire("b", 80, big));
  // 5 bytes would fit (95 <= 100), but the earlier waiter has a claim.
  EXPECT_FALSE(budget.Acquire("c", 5, small));
  EXPECT_EQ(budget.used(), 90);
  budget.Release("a", 90);
  big->AwaitGrants(1);
  small->AwaitGrants(1);
  EXPECT_EQ(order_, (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(budget.used(), 85);
}

TEST_F(ByteBudgetTest, ALargeRequestIsAdmittedWithinBoundedReleasesUnderAFloodOfSmallOnes) {
  // Ten addresses keep 10 small samples in flight each; one large request
  // (80 of 100 bytes) arrives. Greedy admission would let the flood refill
  // every release forever; with the head's reservation it gets in once the
  // samples ahead of it drain.
  ByteBudget budget(Opts(100));
  std::vector<std::string> flood;
  for (int i = 0; i < 10; ++i) {
    flood.push_back("flood" + std::to_string(i));
    ASSERT_TRUE(budget.Acquire(flood.back(), 10, nullptr));
  }
  RecordingWaiter* large = NewWaiter("large");
  ASSERT_FALSE(budget.Acquire("large", 80, large));
  std::vector<RecordingWaiter*> small_waiters;
  int releases = 0;
  for (int round = 0; round < 100 && budget.peer_used("large") == 0; ++round) {
    const std::string& peer = flood[round % flood.size()];
    if (budget.peer_used(peer) < 10) continue;  // its request again is still queued
    budget.Release(peer, 10);
    ++releases;
    // The flood asks again at once for what it gave back.
    RecordingWaiter* again = NewWaiter(peer);
    if (budget.Acquire(peer, 10, again)) continue;
    small_waiters.push_back(again);
  }
  // Granted (reserved) within the releases of the ten samples in flight
  // when it arrived.
  ASSERT_EQ(budget.peer_used("large"), 80) << "not admitted after " << releases << " releases";
  EXPECT_LE(releases, 10);
  large->AwaitGrants(1);
  EXPECT_LE(budget.used(), 100);
}

TEST_F(ByteBudgetTest, OneAddressHoldsAtMostItsCapAndItsWaitersDoNotHoldUpOthers) {
  ByteBudget budget(Opts(100, /*per_peer=*/40));
  RecordingWaiter* hog_more = NewWaiter("hog");
  RecordingWaiter* good = NewWaiter("good");
  ASSERT_TRUE(budget.Acquire("hog", 30, nullptr));
  EXPECT_FALSE(budget.Acquire("hog", 30, hog_more));  // 60 > 40: waits for its own address
  EXPECT_EQ(budget.peer_used("hog"), 30);
  // Another address is admitted at once although a waiter came first.
  EXPECT_TRUE(budget.Acquire("good", 50, good));
  EXPECT_EQ(budget.used(), 80);
  // Only the hog's own release admits its waiter.
  budget.Release("good", 50);
  budget.Release("hog", 30);
  hog_more->AwaitGrants(1);
  EXPECT_EQ(budget.peer_used("hog"), 30);
}

TEST_F(ByteBudgetTest, WithinAnAddressAtItsCapTheFirstWaiterIsServedFirst) {
  // One address (several ranks of a node) at its cap: a large request of one
  // of its streams must not be passed by the small ones of its others.
  ByteBudget budget(Opts(100, /*per_peer=*/50));
  RecordingWaiter* large = NewWaiter("large");
  RecordingWaiter* small = NewWaiter("small");
  ASSERT_TRUE(budget.Acquire("node", 45, nullptr));
  EXPECT_FALSE(budget.Acquire("node", 40, large));  // 85 > 50
  EXPECT_FALSE(budget.Acquire("node", 5, small));   // would fit the cap, but comes later
  budget.Release("node", 10);                        // 35 held: still no room for 40
  EXPECT_EQ(budget.peer_used("node"), 35);
  budget.Release("node", 35);                        // empty: the large one goes first
  large->AwaitGrants(1);
  small->AwaitGrants(1);
  EXPECT_EQ(order_, (std::vector<std::string>{"large", "small"}));
  EXPECT_EQ(budget.peer_used("node"), 45);
}

TEST_F(ByteBudgetTest, AnAddressUnderItsFairShareGoesBeforeOneOverIt) {
  ByteBudget budget(Opts(100));
  RecordingWaiter* hog = NewWaiter("hog");
  RecordingWaiter* fresh = NewWaiter("fresh");
  ASSERT_TRUE(budget.Acquire("hog", 90, nullptr));
  EXPECT_FALSE(budget.Acquire("hog", 20, hog));      // first in the queue
  EXPECT_FALSE(budget.Acquire("fresh", 20, fresh));  // second, but holds nothing
  budget.Release("hog", 20);  // 70 in use: room for one of them
  fresh->AwaitGrants(1);
  EXPECT_EQ(hog->Grants(), 0);
  EXPECT_EQ(budget.peer_used("fresh"), 20);
  budget.Release("hog", 20);
  hog->AwaitGrants(1);
}

TEST_F(ByteBudgetTest, AnAddressWithAStreamOpenKeepsItsShareFromClientsThatNeverLetGo) {
  // A trainer between requests (a stream open, nothing held) and a hog from
  // four addresses that takes all it may and never releases (it never reads).
  ByteBudget budget(Opts(120, /*per_peer=*/60));
  budget.Join("trainer");
  for (const char* hog : {"hog1", "hog2", "hog3", "hog4"}) budget.Join(hog);
  // Five addresses and a newcomer: a share of 20 each. The hogs take theirs...
  for (int round = 0; round < 4; ++round) {
    for (const char* hog : {"hog1", "hog2", "hog3", "hog4"}) {
      ASSERT_TRUE(budget.Acquire(hog, 5, nullptr));
    }
  }
  // ...and no more: what is left is the trainer's and a newcomer's.
  for (const char* hog : {"hog1", "hog2", "hog3", "hog4"}) {
    EXPECT_FALSE(budget.Acquire(hog, 4, NewWaiter(hog)));
  }
  EXPECT_EQ(budget.used(), 80);
  // The trainer's share is there at once, whenever it asks...
  EXPECT_TRUE(budget.Acquire("trainer", 15, nullptr));
  EXPECT_TRUE(budget.Acquire("trainer", 5, nullptr));
  // ...and so is a newcomer's, that connected after the hog filled the rest.
  budget.Join("late");
  EXPECT_TRUE(budget.Acquire("late", 15, nullptr));
  budget.Release("late", 15);
  budget.Leave("late");
  EXPECT_EQ(budget.waiters(), 4);
  // The trainer's stream ends: nothing is kept for it any more, and the
  // hogs' waiters take what it let go (shares of 24 now).
  budget.Release("trainer", 20);
  budget.Leave("trainer");
  for (const auto& w : waiters_) w->AwaitGrants(1);
  EXPECT_EQ(budget.used(), 96);
}

TEST_F(ByteBudgetTest, AWaiterHeldBackByOthersKeptSharesStopsNobodyDrawingOnTheirOwn) {
  ByteBudget budget(Opts(120, /*per_peer=*/60));
  RecordingWaiter* fresh = NewWaiter("fresh");
  RecordingWaiter* trainer = NewWaiter("trainer");
  // Three addresses and a newcomer: shares of 30.
  for (const char* peer : {"trainer", "hog", "fresh"}) budget.Join(peer);
  ASSERT_TRUE(budget.Acquire("hog", 30, nullptr));      // held for good
  ASSERT_TRUE(budget.Acquire("trainer", 10, nullptr));  // keeps 20 more
  // An address asks for more than is left beside the others' kept shares
  // (40 + 40 > 120 - 20 - 30): it waits, under its share, first in line.
  EXPECT_FALSE(budget.Acquire("fresh", 40, fresh));
  // The trainer draws on its own kept share: admitted at once, not behind it.
  EXPECT_TRUE(budget.Acquire("trainer", 10, trainer));
  EXPECT_EQ(budget.peer_used("trainer"), 20);
  EXPECT_EQ(fresh->Grants(), 0);
  // The trainer's stream ends: its share is no longer kept (shares of 40)
  // and the waiter fits (30 + 40 <= 120 - 40).
  budget.Release("trainer", 20);
  budget.Leave("trainer");
  fresh->AwaitGrants(1);
  EXPECT_EQ(budget.peer_used("fresh"), 40);
}

TEST_F(ByteBudgetTest, ACancelledWaiterIsNeverGrantedAndTheNextOneMovesUp) {
  ByteBudget budget(Opts(100));
  RecordingWaiter* big = NewWaiter("big");
  RecordingWaiter* small = NewWaiter("small");
  ASSERT_TRUE(budget.Acquire("a", 50, nullptr));
  EXPECT_FALSE(budget.Acquire("b", 80, big));
  EXPECT_FALSE(budget.Acquire("c", 10, small));  // behind the head
  EXPECT_TRUE(budget.Cancel(big));
  EXPECT_FALSE(budget.Cancel(big));
  small->AwaitGrants(1);  // the head left: the small one fits
  budget.Release("a", 50);
  EXPECT_EQ(budget.used(), 10);
  EXPECT_EQ(big->Grants(), 0);
}

TEST_F(ByteBudgetTest, AnEmptyBudgetAdmitsOneOversizedReservation) {
  ByteBudget budget(Opts(10));
  EXPECT_TRUE(budget.Acquire("a", 50, nullptr));
  EXPECT_EQ(budget.peak(), 50);
  budget.Release("a", 50);
  EXPECT_EQ(budget.used(), 0);
}

TEST_F(ByteBudgetTest, TellsWhenUseRisesAboveAndFallsToTheQuietLevel) {
  std::vector<bool> transitions;
  ByteBudget::Options o = Opts(100);
  o.quiet_bytes = 10;
  ByteBudget budget(o, [&](bool busy) { transitions.push_back(busy); });
  ASSERT_TRUE(budget.Acquire("a", 5, nullptr));   // quiet
  ASSERT_TRUE(budget.Acquire("a", 20, nullptr));  // busy
  budget.Release("a", 10);                        // 15: still busy
  budget.Release("a", 10);                        // 5: quiet
  EXPECT_EQ(transitions, (std::vector<bool>{true, false}));
}

TEST_F(ByteBudgetTest, GrantsMadeBeforeDestructionAreDelivered) {
  RecordingWaiter* w = NewWaiter("w");
  {
    ByteBudget budget(Opts(10));
    ASSERT_TRUE(budget.Acquire("a", 10, nullptr));
    ASSERT_FALSE(budget.Acquire("b", 10, w));
    budget.Release("a", 10);
  }
  EXPECT_EQ(w->Grants(), 1);
}

}  // namespace
}  // namespace sophon
