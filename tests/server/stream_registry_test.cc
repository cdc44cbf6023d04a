#include "server/stream_registry.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

struct FakeMember : StreamRegistry::Member {
  void Ref() override { ++refs; }
  void Unref() override { --refs; }
  void CheckIdle(absl::Time) override {
    if (++checks == 1) checked.Notify();
  }
  std::atomic<int> refs{0};
  std::atomic<int> checks{0};
  absl::Notification checked;
};

TEST(StreamRegistryTest, CapsStreamsInAllAndPerPeerNamingTheLimit) {
  StreamRegistry registry(/*max_streams=*/3, /*max_per_peer=*/2, absl::Seconds(10));
  FakeMember a, b, c, d;
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
}

TEST(StreamRegistryTest, TheReaperChecksEveryMemberHoldingAReference) {
  StreamRegistry registry(10, 10, absl::Milliseconds(5));
  FakeMember a;
  ASSERT_TRUE(registry.Register("p", &a).ok());
  a.checked.WaitForNotification();
  registry.Unregister("p", &a);
  // Each check is bracketed by Ref/Unref; once unregistered no new ones start.
  for (int i = 0; i < 1000 && a.refs != 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(a.refs, 0);
}

TEST(StreamRegistryTest, PeerAddressDropsThePort) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.7:51234"), "ipv4:10.0.0.7");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:5000"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerAddress("unix:/tmp/sock"), "unix:/tmp/sock");
}

}  // namespace
}  // namespace sophon
