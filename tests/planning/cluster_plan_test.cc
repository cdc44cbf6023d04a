#include "sophon/planning/cluster_plan.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

DatasetProfile RandomProfile(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "random";
  for (int i = 0; i < n; ++i) {
    SampleProfile s;
    s.id = i;
    const uint64_t raw = 20000 + static_cast<uint64_t>(u(rng) * 600000);
    s.bytes[Stage::kRaw] = raw;
    s.bytes[Stage::kCropped] = 150528;
    s.bytes[Stage::kFlipped] = 150528;
    s.bytes[Stage::kTensor] = 602112;
    s.bytes[Stage::kJpegCrop] = s.bytes[Stage::kRaw];
    s.client = testing::MakeOpTimes(1e-3 + 2e-8 * static_cast<double>(raw) * (0.5 + u(rng)),
                                    2e-5, 4e-4);
    p.samples.push_back(s);
  }
  return p;
}

ServerResources Server(double mbit, double cpus) {
  ServerResources s;
  s.net_bytes_per_s = MbitToBytesPerSecond(mbit);
  s.remote_cpus = cpus;
  return s;
}

// Samples 0..n-1 spread over `shards` groups round robin, each on its own server.
SampleHolders Sharded(size_t n, int shards) {
  SampleHolders h;
  for (int k = 0; k < shards; ++k) h.holders.push_back({k});
  for (size_t i = 0; i < n; ++i) h.group_of.push_back(static_cast<int>(i % shards));
  return h;
}

TEST(ClusterPlanTest, OneServerIsTheSingleServerModel) {
  const DatasetProfile p = RandomProfile(400, 1);
  Resources r;
  r.net_bytes_per_s = MbitToBytesPerSecond(200);
  r.remote_cpus = 2;
  r.local_cpus = 2;
  r.gpu_seconds_per_batch = 0.05;
  r.batch_size = 32;
  const ClusterResources c = ClusterResources::FromResources(r);
  const std::vector<uint64_t> ids = AllSampleIds(p);
  absl::StatusOr<ClusterPlanResult> cluster =
      MakeClusterPlan(PlannerKind::kOptimal, p, c, ids, Sharded(ids.size(), 1));
  absl::StatusOr<PlanResult> single = MakePlan(PlannerKind::kOptimal, p, r, ids);
  ASSERT_TRUE(cluster.ok() && single.ok()) << cluster.status();
  EXPECT_EQ(cluster->stages, single->stages);
  EXPECT_NEAR(cluster->cost.epoch_s, single->cost.epoch_s, 1e-9);
  EXPECT_NEAR(cluster->lower_bound_s, single->lower_bound_s, 1e-9);
}

TEST(ClusterPlanTest, ShardedServersKeepTheirSamplesAndTheSlowLinkBinds) {
  const DatasetProfile p = RandomProfile(600, 2);
  ClusterResources c;
  c.servers = {Server(100, 1), Server(100, 1), Server(20, 1)};
  c.local_cpus = 8;
  c.batch_size = 32;
  const std::vector<uint64_t> ids = AllSampleIds(p);
  absl::StatusOr<ClusterPlanResult> plan =
      MakeClusterPlan(PlannerKind::kOptimal, p, c, ids, Sharded(ids.size(), 3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(plan->servers[i], static_cast<int>(i % 3));
  EXPECT_EQ(plan->cost.servers[2].samples, 200);
  EXPECT_EQ(plan->cost.bottleneck, "server 2 link") << DescribeClusterPlan(*plan);
  EXPECT_LE(plan->lower_bound_s, plan->cost.epoch_s + 1e-9);
  // The joint model agrees with a direct evaluation of the same plan.
  absl::StatusOr<ClusterPlanCost> again =
      EvaluateClusterPlan(p, c, ids, plan->stages, plan->servers);
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->epoch_s, plan->cost.epoch_s);
}

TEST(ClusterPlanTest, ReplicasShareInProportionToCapacityAndTheIngressIsShared) {
  const DatasetProfile p = RandomProfile(900, 3);
  ClusterResources c;
  c.servers = {Server(200, 8), Server(100, 8)};
  c.local_cpus = 64;
  c.batch_size = 32;
  const std::vector<uint64_t> ids = AllSampleIds(p);
  SampleHolders replicated;
  replicated.holders = {{0, 1}};
  replicated.group_of.assign(ids.size(), 0);
  absl::StatusOr<ClusterPlanResult> plan =
      MakeClusterPlan(PlannerKind::kOptimal, p, c, ids, replicated);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Link-bound: the 200 Mbit/s replica takes about two thirds.
  const double share0 = static_cast<double>(plan->cost.servers[0].samples) / ids.size();
  EXPECT_NEAR(share0, 2.0 / 3, 0.05) << DescribeClusterPlan(*plan);
  // Interleaved: any stretch of the order is spread over both.
  int first_hundred_on_1 = 0;
  for (int i = 0; i < 100; ++i) first_hundred_on_1 += plan->servers[i] == 1;
  EXPECT_NEAR(first_hundred_on_1, 33, 3);
  // A 150 Mbit/s ingress shared by both binds instead of either link.
  c.ingress_bytes_per_s = MbitToBytesPerSecond(150);
  absl::StatusOr<ClusterPlanResult> shared =
      MakeClusterPlan(PlannerKind::kOptimal, p, c, ids, replicated);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->cost.bottleneck, "ingress") << DescribeClusterPlan(*shared);
  EXPECT_GT(shared->cost.epoch_s, plan->cost.epoch_s);
  EXPECT_LE(shared->lower_bound_s, shared->cost.epoch_s + 1e-9);
}

TEST(ClusterPlanTest, ShareOfSplitsTheTrainingNodeAndValidationNamesTheServer) {
  ClusterResources c;
  c.servers = {Server(100, 2), Server(50, 4)};
  c.ingress_bytes_per_s = MbitToBytesPerSecond(80);
  c.local_cpus = 4;
  c.gpu_seconds_per_batch = 0.1;
  const Resources r = ShareOf(c, 1, 0.25);
  EXPECT_DOUBLE_EQ(r.net_bytes_per_s, MbitToBytesPerSecond(20));  // min(50, 80 / 4)
  EXPECT_DOUBLE_EQ(r.remote_cpus, 4);
  EXPECT_DOUBLE_EQ(r.local_cpus, 1);
  EXPECT_DOUBLE_EQ(r.gpu_seconds_per_batch, 0.4);
  c.servers[1].net_bytes_per_s = 0;
  const absl::Status st = c.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("servers[1]"), std::string::npos) << st;
}

}  // namespace
}  // namespace sophon
