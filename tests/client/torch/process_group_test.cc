// DataParallel with real ranks: two threads of this process, each with its
// own TCPStore client and ProcessGroupGloo on loopback.
#include "client/torch/process_group.h"

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/torch/ranks.h"
#include "tests/client/torch/skip_without_gloo.h"

namespace sophon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FreePort;
using testing::OnRanks;
using testing::RankOptions;

TEST(BucketsOfTest, ConsecutiveTensorsOfOneDtypeUpToTheBucketSize) {
  const std::vector<torch::Tensor> tensors = {
      torch::zeros({4}),                  // 16 bytes
      torch::zeros({2, 2}),               // 16
      torch::zeros({8}),                  // 32: too big to join
      torch::zeros({1}, torch::kLong),    // another dtype
      torch::zeros({1}, torch::kLong),    //
      torch::zeros({3}),                  // float again
  };
  EXPECT_THAT(BucketsOf(tensors, 32), ElementsAre(ElementsAre(0, 1), ElementsAre(2),
                                                  ElementsAre(3, 4), ElementsAre(5)));
  EXPECT_THAT(BucketsOf(tensors, 1), ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                                                 ElementsAre(3), ElementsAre(4), ElementsAre(5)));
  EXPECT_THAT(BucketsOf(tensors, 1 << 20),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4), ElementsAre(5)));
  EXPECT_TRUE(BucketsOf({}, 32).empty());
}

TEST(DataParallelTest, OneRankIsNoGroup) {
  DistributedOptions options;
  auto group = DataParallel::Create(options);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(group.status().message(), HasSubstr("world_size >= 2, got 1"));
  options.world_size = 2;
  options.rank = 2;
  EXPECT_THAT(DataParallel::Create(options).status().message(),
              HasSubstr("DistributedOptions.rank"));
}

TEST(ChooseBackendTest, AutoIsNcclOnCudaWhereBuiltElseGloo) {
  DistributedOptions options;
  options.world_size = 2;
  const CollectiveBackends both{/*gloo=*/true, /*nccl=*/true};
  const CollectiveBackends gloo_only{/*gloo=*/true, /*nccl=*/false};
  const CollectiveBackends nccl_only{/*gloo=*/false, /*nccl=*/true};
  EXPECT_EQ(*ChooseBackend(options, "cpu", both), "gloo");
  EXPECT_EQ(*ChooseBackend(options, "cuda", both), "nccl");
  EXPECT_EQ(*ChooseBackend(options, "cuda:1", both), "nccl");
  EXPECT_EQ(*ChooseBackend(options, "cuda", gloo_only), "gloo");
  EXPECT_EQ(*ChooseBackend(options, "cuda", nccl_only), "nccl");
  options.backend = "gloo";
  EXPECT_EQ(*ChooseBackend(options, "cuda", both), "gloo");
}

TEST(ChooseBackendTest, WhatCannotWorkIsRefusedByName) {
  DistributedOptions options;
  options.world_size = 2;
  const CollectiveBackends nccl_only{/*gloo=*/false, /*nccl=*/true};
  const CollectiveBackends gloo_only{/*gloo=*/true, /*nccl=*/false};
  // A build without Gloo (a pip wheel's LibTorch) refuses ranks on CPU.
  absl::StatusOr<std::string> b = ChooseBackend(options, "cpu", nccl_only);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("no Gloo backend"));
  EXPECT_THAT(b.status().message(), HasSubstr("'cpu'"));
  EXPECT_THAT(b.status().message(), HasSubstr("--dist-backend=nccl"));
  options.backend = "nccl";
  EXPECT_THAT(ChooseBackend(options, "cpu", nccl_only).status().message(),
              HasSubstr("needs the model on CUDA"));
  EXPECT_THAT(ChooseBackend(options, "cuda", gloo_only).status().message(),
              HasSubstr("no NCCL backend"));
  options.backend = "mpi";
  EXPECT_THAT(options.Validate().message(), HasSubstr("DistributedOptions.backend"));
}

TEST(ChooseBackendTest, CreateUsesWhatThisBuildHas) {
  DistributedOptions options = RankOptions(0, 2, FreePort(), absl::Seconds(1));
  options.backend = "nccl";
  // NCCL never serves a model on CPU, whatever the build has.
  EXPECT_THAT(DataParallel::Create(options, "cpu").status().message(),
              HasSubstr("needs the model on CUDA"));
  if (!BuiltBackends().gloo) {
    options.backend = "auto";
    EXPECT_THAT(DataParallel::Create(options, "cpu").status().message(),
                HasSubstr("no Gloo backend"));
  }
}

// Rank r's tensors: values that differ by rank.
std::vector<torch::Tensor> RankTensors(int rank) {
  return {torch::full({3, 2}, 1.0 + rank), torch::arange(5, torch::kFloat) * (rank + 1),
          torch::full({}, 10 * rank, torch::kLong)};
}

TEST(DataParallelTest, BroadcastCopiesRankZerosTensors) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = FreePort();
  std::vector<std::vector<torch::Tensor>> after(2);
  OnRanks(2, [&](int rank) {
    DistributedOptions options = RankOptions(rank, 2, port);
    options.bucket_bytes = 24;  // the [3, 2] floats fill a bucket
    auto group = DataParallel::Create(options);
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->rank(), rank);
    EXPECT_EQ((*group)->world_size(), 2);
    std::vector<torch::Tensor> tensors = RankTensors(rank);
    ASSERT_TRUE((*group)->Broadcast(tensors, "buffers").ok());
    // [3, 2] | [5] | the long scalar: three buckets.
    EXPECT_EQ((*group)->stats().broadcasts, 3);
    after[rank] = tensors;
  });
  const std::vector<torch::Tensor> expected = RankTensors(0);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(after[rank].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::equal(after[rank][i], expected[i])) << "rank " << rank << " tensor " << i;
    }
  }
}

TEST(DataParallelTest, GradientsAreAveragedInBuckets) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = FreePort();
  std::vector<std::vector<torch::Tensor>> grads(2);
  std::vector<DataParallel::Stats> stats(2);
  OnRanks(2, [&](int rank) {
    DistributedOptions options = RankOptions(rank, 2, port);
    options.bucket_bytes = 40;  // 10 floats: [2, 3] + [4] | [16] | [3]
    auto group = DataParallel::Create(options);
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<torch::Tensor> params = {
        torch::zeros({2, 3}, torch::requires_grad()), torch::zeros({4}, torch::requires_grad()),
        torch::zeros({16}, torch::requires_grad()), torch::zeros({3}, torch::requires_grad())};
    for (size_t i = 0; i < params.size(); ++i) {
      // Rank 1 has no gradient for the last parameter (it counts as zeros).
      if (rank == 1 && i == 3) continue;
      params[i].mutable_grad() = torch::arange(params[i].numel(), torch::kFloat)
                                     .reshape(params[i].sizes()) * (rank == 0 ? 1 : 3) +
                                 static_cast<double>(i);
    }
    ASSERT_TRUE((*group)->AllReduceGradients(params).ok());
    stats[rank] = (*group)->stats();
    for (const torch::Tensor& p : params) grads[rank].push_back(p.grad());
  });
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {4}, {16}, {3}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const torch::Tensor base = torch::arange(c10::multiply_integers(shapes[i]), torch::kFloat)
                                   .reshape(shapes[i]);
    // Mean of (base + i) and (3 base + i), or of (base + i) and zeros.
    const torch::Tensor expected = i == 3 ? (base + 3) / 2 : 2 * base + static_cast<double>(i);
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(grads[rank][i].defined()) << "rank " << rank << " parameter " << i;
      EXPECT_TRUE(torch::equal(grads[rank][i], expected))
          << "rank " << rank << " parameter " << i << ": " << grads[rank][i];
    }
  }
  EXPECT_EQ(stats[0].all_reduces, 3);
  EXPECT_EQ(stats[1].all_reduces, 3);
}

TEST(DataParallelTest, RendezvousWithoutRankZeroFailsNamingRankAndAddress) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = FreePort();
  auto group = DataParallel::Create(RankOptions(1, 2, port, absl::Seconds(1)));
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(group.status().message(),
              HasSubstr("rank 1 of 2: the rendezvous at 127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(group.status().message(), HasSubstr("collective_timeout 1s"));
  EXPECT_THAT(group.status().message(), HasSubstr("rank 0 hosts the c10d store there"));
}

TEST(DataParallelTest, RendezvousWithoutTheOtherRanksFailsOnRankZero) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = FreePort();
  auto group = DataParallel::Create(RankOptions(0, 3, port, absl::Seconds(1)));
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(group.status().message(), HasSubstr("rank 0 of 3: the rendezvous at 127.0.0.1:"));
  EXPECT_THAT(group.status().message(),
              HasSubstr("rank 1 of 3 has not joined (no heartbeat); "
                        "rank 2 of 3 has not joined (no heartbeat)"));
}

}  // namespace
}  // namespace sophon
