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
};

TEST(StreamRegistryTest, CapsStreamsInAllAndPerPeerNamingTheLimit) {
  FakeMember a, b, c, d;
  StreamRegistry registry(/*max_streams=*/3, /*max_per_peer=*/2, absl::Seconds(10));
  Limit limit = Limit::kInvalidRequest;
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.1", &a, &limit).ok());
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.1", &b, &limit).ok());
  absl::Status s = registry.Register("ipv4:10.0.0.1", &c, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_streams_per_peer"), std::string::npos) << s;
  EXPECT_EQ(limit, Limit::kMaxStreamsPerPeer);
  ASSERT_TRUE(registry.Register("ipv4:10.0.0.2", &c, &limit).ok());
  s = registry.Register("ipv4:10.0.0.3", &d, &limit);
  EXPECT_EQ(limit, Limit::kMaxStreams);
  EXPECT_NE(s.message().find("max_streams = 3"), std::string::npos) << s;
  registry.Unregister("ipv4:10.0.0.1", &a);
  EXPECT_TRUE(registry.Register("ipv4:10.0.0.1", &d, &limit).ok());
  EXPECT_EQ(registry.open_streams(), 3);
  EXPECT_EQ(registry.streams_opened(), 4u);
  for (FakeMember* m : {&b, &d}) registry.Unregister("ipv4:10.0.0.1", m);
  registry.Unregister("ipv4:10.0.0.2", &c);
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
