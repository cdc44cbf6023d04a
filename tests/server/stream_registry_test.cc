#include "server/stream_registry.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

// A stream as the registry sees it. Like a FetchReactor it holds one
// reference to itself while open, so a check made without the reaper's own
// reference sees 1, and a Ref without its Unref leaves more than 1 behind.
// Members must outlive the registry (its reaper may still be calling one
// that has just unregistered).
class FakeMember : public StreamRegistry::Member {
 public:
  void Ref() override {
    absl::MutexLock lock(&mu_);
    ++refs_;
  }
  void Unref() override {
    absl::MutexLock lock(&mu_);
    --refs_;
  }
  void Evict(absl::Status why) override {
    absl::MutexLock lock(&mu_);
    evicted_ = std::move(why);
    refs_in_evict_ = refs_;
  }
  void Drain(absl::Status why) override {
    absl::MutexLock lock(&mu_);
    drained_ = std::move(why);
  }
  absl::Status evicted() {
    absl::MutexLock lock(&mu_);
    return evicted_;
  }
  absl::Status drained() {
    absl::MutexLock lock(&mu_);
    return drained_;
  }
  int refs_in_evict() {
    absl::MutexLock lock(&mu_);
    return refs_in_evict_;
  }
  void CheckIdle(absl::Time now) override {
    std::function<void()> on_check;
    {
      absl::MutexLock lock(&mu_);
      refs_in_check_.push_back(refs_);
      nows_.push_back(now);
      on_check = std::move(on_check_);
      on_check_ = nullptr;
    }
    if (on_check) on_check();
    absl::MutexLock lock(&mu_);
    ++checks_done_;
  }

  // Runs once, inside the next check.
  void OnNextCheck(std::function<void()> f) {
    absl::MutexLock lock(&mu_);
    on_check_ = std::move(f);
  }
  void WaitForChecks(int n) {
    struct Target {
      const int* done;
      int n;
    };
    absl::MutexLock lock(&mu_);
    Target target{&checks_done_, n};
    mu_.Await(absl::Condition(+[](Target* t) { return *t->done >= t->n; }, &target));
  }
  int checks() {
    absl::MutexLock lock(&mu_);
    return checks_done_;
  }
  int refs() {
    absl::MutexLock lock(&mu_);
    return refs_;
  }
  std::vector<int> refs_in_check() {
    absl::MutexLock lock(&mu_);
    return refs_in_check_;
  }
  std::vector<absl::Time> nows() {
    absl::MutexLock lock(&mu_);
    return nows_;
  }

 private:
  absl::Mutex mu_;
  int refs_ ABSL_GUARDED_BY(mu_) = 1;  // its own
  int checks_done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> refs_in_check_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> nows_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_check_ ABSL_GUARDED_BY(mu_);
  absl::Status evicted_ ABSL_GUARDED_BY(mu_);
  absl::Status drained_ ABSL_GUARDED_BY(mu_);
  int refs_in_evict_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(StreamRegistryTest, CapsStreamsInAllAndPerPeerNamingTheLimit) {
  FakeMember a, b, c, d, e;
  StreamRegistry registry(/*max_streams=*/3, /*max_per_peer=*/2, absl::Seconds(10));
  Limit limit = Limit::kInvalidRequest;
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.1", &a, &limit).ok());
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.1", &b, &limit).ok());
  absl::Status s = registry.Register("ipv4:10.0.0.1", &c, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_streams_per_peer"), std::string::npos) << s;
  EXPECT_EQ(limit, Limit::kMaxStreamsPerPeer);
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.2", &c, &limit).ok());
  // Full, and every address holds one stream: nobody holds more than its share.
  registry.Unregister("ipv4:10.0.0.1", &a);
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.3", &d, &limit).ok());
  s = registry.Register("ipv4:10.0.0.3", &e, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limit, Limit::kMaxStreams);
  EXPECT_NE(s.message().find("max_streams = 3"), std::string::npos) << s;
  EXPECT_EQ(registry.open_streams(), 3);
  EXPECT_EQ(registry.streams_opened(), 4u);
  EXPECT_EQ(registry.streams_evicted(), 0u);
  for (auto [peer, m] : {std::pair{"ipv4:10.0.0.1", &b}, {"ipv4:10.0.0.2", &c},
                         {"ipv4:10.0.0.3", &d}}) {
    registry.Unregister(peer, m);
  }
  EXPECT_EQ(registry.open_streams(), 0);
  for (FakeMember* m : {&a, &b, &c, &d, &e}) EXPECT_TRUE(m->evicted().ok());
}

TEST(StreamRegistryTest, DrainTellsEveryMemberAndRefusesNewStreamsWithItsReason) {
  FakeMember a, b, c;
  StreamRegistry registry(/*max_streams=*/10, /*max_per_peer=*/10, absl::Seconds(10));
  ASSERT_TRUE(registry.Register("p", &a).ok());
  ASSERT_TRUE(registry.Register("q", &b).ok());
  registry.DrainAll(absl::UnavailableError("draining"));
  EXPECT_EQ(a.drained().message(), "draining");
  EXPECT_EQ(b.drained().message(), "draining");
  EXPECT_TRUE(a.evicted().ok());
  EXPECT_EQ(a.refs(), 1) << "each Ref has its Unref";
  Limit limit = Limit::kInvalidRequest;
  const absl::Status s = registry.Register("r", &c, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "draining");
  EXPECT_EQ(limit, Limit::kDraining);
  EXPECT_TRUE(c.drained().ok()) << "a refused stream is not a member";
  EXPECT_EQ(registry.open_streams(), 2);
  // A drain that runs out of time ends the streams left.
  registry.Unregister("p", &a);
  registry.EvictAll(absl::UnavailableError("out of time"));
  EXPECT_TRUE(a.evicted().ok()) << "unregistered: left alone";
  EXPECT_EQ(b.evicted().message(), "out of time");
  registry.Unregister("q", &b);
  EXPECT_EQ(registry.open_streams(), 0);
}

TEST(StreamRegistryTest, AFullServerMakesRoomByEvictingTheLargestHoldersOldestStream) {
  FakeMember a1, a2, a3, b1, c1;
  StreamRegistry registry(/*max_streams=*/4, /*max_per_peer=*/10, absl::Seconds(10));
  for (FakeMember* m : {&a1, &a2, &a3}) ASSERT_TRUE(registry.Register("hog", m).ok());
  ASSERT_TRUE(registry.Register("b", &b1).ok());
  // Full: "c" holds none, "hog" holds three, so hog's oldest stream goes.
  Limit limit = Limit::kInvalidRequest;
  ASSERT_TRUE(registry.Register("c", &c1, &limit).ok());
  EXPECT_EQ(a1.evicted().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a1.evicted().message().find("max_streams = 4"), std::string::npos) << a1.evicted();
  EXPECT_NE(a1.evicted().message().find("hog"), std::string::npos) << a1.evicted();
  EXPECT_EQ(a1.refs_in_evict(), 2);  // told while the registry holds a reference
  EXPECT_EQ(a1.refs(), 1);
  for (FakeMember* m : {&a2, &a3, &b1, &c1}) EXPECT_TRUE(m->evicted().ok());
  EXPECT_EQ(registry.open_streams(), 4);
  EXPECT_EQ(registry.streams_evicted(), 1u);
  // The evicted stream unregisters when it ends: a no-op, its slot is taken.
  registry.Unregister("hog", &a1);
  EXPECT_EQ(registry.open_streams(), 4);
  for (auto [peer, m] : {std::pair{"hog", &a2}, {"hog", &a3}, {"b", &b1}, {"c", &c1}}) {
    registry.Unregister(peer, m);
  }
  EXPECT_EQ(registry.open_streams(), 0);
}

TEST(StreamRegistryTest, EveryCheckHoldsAReferenceAndUnregisteredMembersAreLeftAlone) {
  FakeMember a, b;
  const absl::Time start = absl::Now();
  {
    StreamRegistry registry(10, 10, absl::Milliseconds(5));
    ASSERT_TRUE(registry.Register("p", &a).ok());
    ASSERT_TRUE(registry.Register("q", &b).ok());
    a.WaitForChecks(2);
    b.WaitForChecks(2);
    registry.Unregister("p", &a);
    const int a_checks = a.checks();
    // Two more checks of b: the second is from a pass that began after the
    // Unregister, which must leave a out; only a pass already under way may
    // still check it (once).
    b.WaitForChecks(b.checks() + 2);
    EXPECT_LE(a.checks(), a_checks + 1);
    registry.Unregister("q", &b);
  }  // joins the reaper: every check is over
  const absl::Time end = absl::Now();
  for (FakeMember* m : {&a, &b}) {
    EXPECT_EQ(m->refs(), 1) << "each Ref has its Unref";
    for (int refs : m->refs_in_check()) EXPECT_EQ(refs, 2) << "its own and the reaper's";
    for (absl::Time now : m->nows()) {
      EXPECT_LE(start, now);
      EXPECT_LE(now, end);
    }
  }
}

// A stream found idle ends itself from its check: it unregisters there, so
// the reaper must not hold the registry's lock while it calls members.
TEST(StreamRegistryTest, AMemberMayUnregisterFromItsCheck) {
  FakeMember a, b;
  {
    StreamRegistry registry(/*max_streams=*/1, 1, absl::Milliseconds(5));
    bool unregistered = false;
    absl::Notification done;
    std::thread t;
    a.OnNextCheck([&] {
      // On another thread, so that a reaper holding the lock fails the test
      // instead of deadlocking it.
      t = std::thread([&] {
        registry.Unregister("p", &a);
        done.Notify();
      });
      unregistered = done.WaitForNotificationWithTimeout(absl::Seconds(10));
    });
    ASSERT_TRUE(registry.Register("p", &a).ok());
    a.WaitForChecks(1);
    EXPECT_TRUE(unregistered) << "Unregister blocked while the reaper called CheckIdle";
    done.WaitForNotification();
    t.join();
    EXPECT_EQ(registry.open_streams(), 0);
    ASSERT_TRUE(registry.Register("p", &b).ok());  // its place is free
    b.WaitForChecks(1);  // a pass after a left
    EXPECT_EQ(a.checks(), 1);
    registry.Unregister("p", &b);
  }
  EXPECT_EQ(a.refs(), 1);
  EXPECT_EQ(b.refs(), 1);
}

TEST(StreamRegistryTest, PeerAddressDropsThePort) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.7:51234"), "ipv4:10.0.0.7");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:5000"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerAddress("unix:/tmp/sock"), "unix:/tmp/sock");
}

}  // namespace
}  // namespace sophon
