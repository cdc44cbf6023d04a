// RankHeartbeat on an in-process c10d store: a rank whose beats stop is
// named, live ranks are not, and an unreadable store is blamed on rank 0,
// its host.
#include "client/torch/rank_heartbeat.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RankHeartbeatOptions Options(int rank, int world_size) {
  RankHeartbeatOptions options;
  options.rank = rank;
  options.world_size = world_size;
  // Long enough that a live rank's thread beats within the three intervals
  // DescribeSilentRanks watches, even on a busy machine.
  options.interval = absl::Milliseconds(100);
  options.store_address = "127.0.0.1:1234";
  return options;
}

std::unique_ptr<RankHeartbeat> Start(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int world_size) {
  auto heartbeat = RankHeartbeat::Start(store, store, Options(rank, world_size));
  EXPECT_TRUE(heartbeat.ok()) << heartbeat.status();
  return heartbeat.ok() ? *std::move(heartbeat) : nullptr;
}

// A store whose host is gone: every operation fails as a TCPStore client's
// does after its server died.
class GoneStore final : public c10d::Store {
 public:
  void set(const std::string&, const std::vector<uint8_t>&) override { Fail(); }
  std::vector<uint8_t> get(const std::string&) override { Fail(); }
  int64_t add(const std::string&, int64_t) override { Fail(); }
  bool deleteKey(const std::string&) override { Fail(); }
  bool check(const std::vector<std::string>&) override { Fail(); }
  int64_t getNumKeys() override { Fail(); }
  void wait(const std::vector<std::string>&) override { Fail(); }
  void wait(const std::vector<std::string>&, const std::chrono::milliseconds&) override { Fail(); }
  // Pure virtual in newer LibTorch (2.x after Debian 13's 2.6), absent in
  // 1.13: declared without `override` so that it overrides where the base
  // has it and is a plain member where it does not.
  c10::intrusive_ptr<c10d::Store> clone() {  // NOLINT(modernize-use-override)
    return c10::make_intrusive<GoneStore>();
  }

 private:
  [[noreturn]] static void Fail() { throw std::runtime_error("Broken pipe"); }
};

TEST(RankHeartbeatTest, LiveRanksAreFresh) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank0 = Start(store, 0, 3);
  auto rank1 = Start(store, 1, 3);
  auto rank2 = Start(store, 2, 3);
  EXPECT_EQ(rank0->DescribeSilentRanks(), "every other rank's heartbeat is fresh");
  EXPECT_EQ(rank2->DescribeSilentRanks(), "every other rank's heartbeat is fresh");
  EXPECT_GE(rank1->beats(), 1);
}

TEST(RankHeartbeatTest, NamesTheRankWhoseBeatsStopped) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank0 = Start(store, 0, 3);
  auto rank1 = Start(store, 1, 3);
  auto rank2 = Start(store, 2, 3);
  rank2.reset();  // its thread is joined: no more beats
  const std::string description = rank0->DescribeSilentRanks();
  EXPECT_THAT(description, HasSubstr("rank 2 of 3 stopped responding (last heartbeat "));
  EXPECT_THAT(description, HasSubstr(" s ago)"));
  EXPECT_THAT(description, Not(HasSubstr("rank 1")));
  EXPECT_THAT(rank1->DescribeSilentRanks(), HasSubstr("rank 2 of 3 stopped responding"));
}

TEST(RankHeartbeatTest, NamesEveryRankThatStopped) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank0 = Start(store, 0, 3);
  Start(store, 1, 3).reset();
  Start(store, 2, 3).reset();
  EXPECT_THAT(rank0->DescribeSilentRanks(),
              ::testing::MatchesRegex("rank 1 of 3 stopped responding .*; "
                                      "rank 2 of 3 stopped responding .*"));
}

TEST(RankHeartbeatTest, NamesRanksThatNeverJoined) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank1 = Start(store, 1, 3);
  EXPECT_EQ(rank1->DescribeSilentRanks(),
            "rank 0 of 3 has not joined (no heartbeat); rank 2 of 3 has not joined (no heartbeat)");
}

TEST(RankHeartbeatTest, AnUnreadableStoreBlamesItsHostRankZero) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank1 = RankHeartbeat::Start(store, c10::make_intrusive<GoneStore>(), Options(1, 2));
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  EXPECT_EQ((*rank1)->DescribeSilentRanks(),
            "rank 0 of 2 (the TCPStore host at 127.0.0.1:1234) is gone or not answering: "
            "Broken pipe");
}

TEST(RankHeartbeatTest, StartFailsNamingTheRankAndStore) {
  auto gone = c10::make_intrusive<GoneStore>();
  auto heartbeat = RankHeartbeat::Start(gone, gone, Options(1, 2));
  ASSERT_FALSE(heartbeat.ok());
  EXPECT_EQ(heartbeat.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(heartbeat.status().message(),
              HasSubstr("rank 1 of 2 cannot write its heartbeat to the store at 127.0.0.1:1234"));
}

}  // namespace
}  // namespace sophon
