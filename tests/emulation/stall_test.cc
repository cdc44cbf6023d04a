#include "sophon/emulation/stall.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

TEST(StallTest, DifferentialBreakdownOfSyntheticTimings) {
  // 1000 images; the step alone runs at 500 img/s -> 2 s of compute.
  // Cached run 5 s -> 3 s prep stall; cold run 9 s -> 4 s fetch stall.
  StallInputs in{1000, 500.0, 5.0, 9.0};
  absl::StatusOr<StallBreakdown> b = ComputeStallBreakdown(in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->epoch_seconds, 9.0);
  EXPECT_DOUBLE_EQ(b->compute_seconds, 2.0);
  EXPECT_DOUBLE_EQ(b->prep_stall_seconds, 3.0);
  EXPECT_DOUBLE_EQ(b->fetch_stall_seconds, 4.0);
  EXPECT_FALSE(b->clamped);
  EXPECT_NEAR(b->compute_fraction() + b->prep_fraction() + b->fetch_fraction(), 1.0, 1e-12);
  EXPECT_NEAR(b->prep_fraction(), 3.0 / 9, 1e-12);
}

TEST(StallTest, ComputeBoundRunHasNoStall) {
  StallInputs in{1000, 100.0, 10.0, 10.0};
  absl::StatusOr<StallBreakdown> b = ComputeStallBreakdown(in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->compute_seconds, 10.0);
  EXPECT_DOUBLE_EQ(b->prep_stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(b->fetch_stall_seconds, 0.0);
  EXPECT_FALSE(b->clamped);
}

TEST(StallTest, NoiseIsClampedSoThePartsStillAddUp) {
  // The cold run came out faster than the cached one (noise): fetch stall 0,
  // raw value kept.
  StallInputs in{1000, 500.0, 5.0, 4.5};
  absl::StatusOr<StallBreakdown> b = ComputeStallBreakdown(in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->clamped);
  EXPECT_DOUBLE_EQ(b->raw_fetch_stall_seconds, -0.5);
  EXPECT_DOUBLE_EQ(b->fetch_stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(b->compute_seconds, 2.0);
  EXPECT_DOUBLE_EQ(b->prep_stall_seconds, 2.5);
  EXPECT_DOUBLE_EQ(b->compute_seconds + b->prep_stall_seconds + b->fetch_stall_seconds, 4.5);

  // The real runs beat the synthetic rate: compute capped at the epoch.
  in = StallInputs{1000, 100.0, 9.0, 9.5};
  b = ComputeStallBreakdown(in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->clamped);
  EXPECT_DOUBLE_EQ(b->compute_seconds, 9.5);
  EXPECT_DOUBLE_EQ(b->prep_stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(b->fetch_stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(b->raw_prep_stall_seconds, -1.0);
}

TEST(StallTest, RejectsMissingFigures) {
  EXPECT_EQ(ComputeStallBreakdown({0, 1, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeStallBreakdown({10, 0, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeStallBreakdown({10, 1, -1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeStallBreakdown({10, 1, 1, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StallTest, CsvRoundTripAndTable) {
  std::vector<StallRow> rows(2);
  rows[0].label = "alexnet";
  rows[0].inputs = {1000, 2500.0, 8.0, 10.0};
  rows[1].label = "resnet50, v100";
  rows[1].inputs = {1000, 360.0, 2.9, 3.0};
  for (StallRow& r : rows) r.breakdown = *ComputeStallBreakdown(r.inputs);
  const std::string csv = FormatStallCsv(rows);
  absl::StatusOr<std::vector<StallRow>> back = ParseStallCsv(csv, "stall.csv");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << csv;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].label, "resnet50, v100");
  EXPECT_DOUBLE_EQ((*back)[0].breakdown.prep_stall_seconds, 8.0 - 0.4);
  EXPECT_DOUBLE_EQ((*back)[0].breakdown.fetch_stall_seconds, 2.0);

  const std::string table = FormatStallTable(*back);
  EXPECT_THAT(table, HasSubstr("alexnet"));
  EXPECT_THAT(table, HasSubstr("prep stall"));
  EXPECT_THAT(table, HasSubstr("76.0%"));  // alexnet's prep stall: 7.6 of 10 s

  absl::StatusOr<std::vector<StallRow>> bad = ParseStallCsv(csv + "broken,1,2\n", "stall.csv");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("stall.csv:4"));
  EXPECT_FALSE(ParseStallCsv("label,x\n", "s.csv").ok());
}

}  // namespace
}  // namespace sophon
