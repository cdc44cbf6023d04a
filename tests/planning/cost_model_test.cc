#include "sophon/planning/cost_model.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// Two samples with round numbers: sizes in bytes, times in seconds.
DatasetProfile TwoSamples() {
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "two";
  for (uint64_t i = 0; i < 2; ++i) {
    SampleProfile s;
    s.id = i;
    s.bytes[Stage::kRaw] = 1000 * (i + 1);
    s.bytes[Stage::kCropped] = 300;
    s.bytes[Stage::kFlipped] = 300;
    s.bytes[Stage::kTensor] = 1200;
    s.bytes[Stage::kJpegCrop] = s.bytes[Stage::kRaw];
    s.client = testing::MakeOpTimes(0.5 * (i + 1), 0.25, 0.125);
    p.samples.push_back(s);
  }
  return p;
}

Resources SomeResources() {
  Resources r;
  r.net_bytes_per_s = 100;
  r.remote_cpus = 2;
  r.remote_speed = 1.5;
  r.local_cpus = 0.5;
  r.gpu_seconds_per_batch = 0;
  r.batch_size = 256;
  return r;
}

TEST(CostModelTest, StageCostSplitsTheOpsAtTheStage) {
  const SampleProfile s = TwoSamples().samples[1];  // ops 1.0, 0.25, 0.125 s
  const StageCost raw = SampleStageCost(s, Stage::kRaw);
  EXPECT_EQ(raw.bytes, 2000u);
  EXPECT_EQ(raw.remote_ns, 0);
  EXPECT_EQ(raw.local_ns, 1'375'000'000);  // RAW: every op on the training node
  const StageCost flipped = SampleStageCost(s, Stage::kFlipped);
  EXPECT_EQ(flipped.bytes, 300u);
  EXPECT_EQ(flipped.remote_ns, 1'250'000'000);
  EXPECT_EQ(flipped.local_ns, 125'000'000);
  const StageCost tensor = SampleStageCost(s, Stage::kTensor);
  EXPECT_EQ(tensor.remote_ns, 1'375'000'000);
  EXPECT_EQ(tensor.local_ns, 0);
}

TEST(CostModelTest, OpsPastTheTargetStageCostNothing) {
  const SampleProfile s = TwoSamples().samples[1];  // ops 1.0, 0.25, 0.125 s
  // The job ends at FLIPPED (the device normalises): the tensor op is no
  // CPU's work.
  const StageCost raw = SampleStageCost(s, Stage::kRaw, Stage::kFlipped);
  EXPECT_EQ(raw.remote_ns, 0);
  EXPECT_EQ(raw.local_ns, 1'250'000'000);
  const StageCost flipped = SampleStageCost(s, Stage::kFlipped, Stage::kFlipped);
  EXPECT_EQ(flipped.bytes, 300u);
  EXPECT_EQ(flipped.remote_ns, 1'250'000'000);
  EXPECT_EQ(flipped.local_ns, 0);
}

TEST(CostModelTest, PredictsEachResourceAndTheBottleneck) {
  const DatasetProfile p = TwoSamples();
  const Resources r = SomeResources();
  const std::vector<uint64_t> ids = {0, 1};
  // Sample 0 RAW (1000 B; 0.875 s local), sample 1 CROPPED (300 B; 1.0 s
  // remote, 0.375 s local).
  absl::StatusOr<PlanCost> c = EvaluatePlan(p, r, ids, {Stage::kRaw, Stage::kCropped});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->wire_bytes, 1300u);
  EXPECT_DOUBLE_EQ(c->net_s, 13.0);
  EXPECT_DOUBLE_EQ(c->remote_cpu_s, 1.5);  // 1.0 client s * speed 1.5
  EXPECT_DOUBLE_EQ(c->remote_s, 0.75);     // on 2 CPUs
  EXPECT_DOUBLE_EQ(c->local_cpu_s, 1.25);
  EXPECT_DOUBLE_EQ(c->local_s, 2.5);  // on half a CPU
  EXPECT_DOUBLE_EQ(c->gpu_s, 0);
  EXPECT_DOUBLE_EQ(c->epoch_s, 13.0);
  EXPECT_EQ(c->bottleneck, Resource::kNetwork);
  EXPECT_EQ(c->samples_per_stage[StageIndex(Stage::kRaw)], 1);
  EXPECT_EQ(c->samples_per_stage[StageIndex(Stage::kCropped)], 1);
  EXPECT_EQ(c->samples_per_stage[StageIndex(Stage::kTensor)], 0);
}

// The storage node reads every sample's file, whatever its stage, and sends
// the wire bytes; the training node receives them. All go beside the ops.
TEST(CostModelTest, ChargesReadingSendingAndReceivingPerByte) {
  const DatasetProfile p = TwoSamples();
  Resources r = SomeResources();
  r.remote_seconds_per_raw_byte = 1e-3;   // 3000 raw bytes read: 3 s
  r.remote_seconds_per_wire_byte = 1e-4;  // 1300 wire bytes sent: 0.13 s
  r.local_seconds_per_wire_byte = 1e-4;   // ... received: 0.13 s
  absl::StatusOr<PlanCost> c = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kCropped});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->remote_cpu_s, 1.5 + 3.0 + 0.13);
  EXPECT_DOUBLE_EQ(c->remote_s, (1.5 + 3.0 + 0.13) / 2);
  EXPECT_DOUBLE_EQ(c->local_cpu_s, 1.25 + 0.13);
  // All RAW: nothing offloaded, yet the storage node still reads and sends.
  absl::StatusOr<PlanCost> raw = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw});
  ASSERT_TRUE(raw.ok());
  EXPECT_DOUBLE_EQ(raw->remote_cpu_s, 3.0 + 0.3);
  r.remote_seconds_per_wire_byte = -1;
  EXPECT_FALSE(EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw}).ok());
}

// A training node slower than when profiled (Resources.local_speed) takes
// longer for its ops and its receiving alike; the storage node is unchanged.
TEST(CostModelTest, TheTrainingNodesSpeedScalesItsCpuWork) {
  const DatasetProfile p = TwoSamples();
  Resources r = SomeResources();
  r.local_seconds_per_wire_byte = 1e-4;  // 1300 wire bytes received: 0.13 s
  r.local_speed = 2;
  absl::StatusOr<PlanCost> c = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kCropped});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->local_cpu_s, 2 * (1.25 + 0.13));
  EXPECT_DOUBLE_EQ(c->local_s, 2 * (1.25 + 0.13) / 0.5);
  EXPECT_DOUBLE_EQ(c->remote_cpu_s, 1.5);
  r.local_speed = 0;
  absl::StatusOr<PlanCost> bad = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Resources.local_speed"), std::string::npos);
}

// A sample the storage node's cache holds costs no read, at any stage.
TEST(CostModelTest, ACachedSampleCostsNoRead) {
  DatasetProfile p = TwoSamples();
  p.samples[1].cached = true;
  EXPECT_EQ(SampleStageCost(p.samples[1], Stage::kCropped).raw_bytes, 0u);
  EXPECT_EQ(SampleStageCost(p.samples[0], Stage::kCropped).raw_bytes, p.samples[0].bytes[kFirstStage]);
  Resources r = SomeResources();
  r.remote_seconds_per_raw_byte = 1e-3;
  r.remote_seconds_per_wire_byte = 0;
  absl::StatusOr<PlanCost> raw = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw});
  ASSERT_TRUE(raw.ok());
  EXPECT_DOUBLE_EQ(raw->remote_cpu_s, p.samples[0].bytes[kFirstStage] * 1e-3);
}

TEST(CostModelTest, ASampleHeldHereCostsNoLinkAndNoStorageNodeAtRaw) {
  DatasetProfile p = TwoSamples();
  p.samples[1].held_here = true;
  const StageCost raw = SampleStageCost(p.samples[1], Stage::kRaw);
  EXPECT_EQ(raw.bytes, 0u);
  EXPECT_EQ(raw.raw_bytes, 0u);
  EXPECT_EQ(raw.remote_ns, 0);
  SampleProfile fetched = p.samples[1];
  fetched.held_here = false;
  EXPECT_EQ(raw.local_ns, SampleStageCost(fetched, Stage::kRaw).local_ns);  // every op here
  // Taking the file out of the cache is this node's work too.
  SampleProfile read = p.samples[1];
  read.held_read_seconds = 0.002;
  EXPECT_EQ(SampleStageCost(read, Stage::kRaw).local_ns, raw.local_ns + 2000000);
  EXPECT_EQ(SampleStageCost(read, Stage::kCropped).local_ns,
            SampleStageCost(p.samples[1], Stage::kCropped).local_ns);
  EXPECT_EQ(SampleStageCost(fetched, Stage::kRaw).bytes, fetched.bytes[kFirstStage]);
  // Planned further it is the storage node's job like any other sample.
  const StageCost cropped = SampleStageCost(p.samples[1], Stage::kCropped);
  EXPECT_EQ(cropped.bytes, 300u);
  EXPECT_EQ(cropped.raw_bytes, p.samples[1].bytes[kFirstStage]);
  Resources r = SomeResources();
  absl::StatusOr<PlanCost> c = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->wire_bytes, p.samples[0].bytes[kFirstStage]);
  EXPECT_DOUBLE_EQ(c->net_s, p.samples[0].bytes[kFirstStage] / r.net_bytes_per_s);
}

TEST(CostModelTest, GpuCountsWholeBatches) {
  const DatasetProfile p = TwoSamples();
  Resources r = SomeResources();
  r.batch_size = 1;
  r.gpu_seconds_per_batch = 20;
  absl::StatusOr<PlanCost> c = EvaluatePlan(p, r, {0, 1}, {Stage::kTensor, Stage::kTensor});
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->gpu_s, 40);
  EXPECT_EQ(c->bottleneck, Resource::kGpu);
  r.batch_size = 256;  // one partial batch
  c = EvaluatePlan(p, r, {0, 1}, {Stage::kTensor, Stage::kTensor});
  EXPECT_DOUBLE_EQ(c->gpu_s, 20);
  EXPECT_EQ(c->bottleneck, Resource::kNetwork);  // 2400 B at 100 B/s = 24 s
}

TEST(CostModelTest, ZeroStorageCpusOnlyAllowRaw) {
  const DatasetProfile p = TwoSamples();
  Resources r = SomeResources();
  r.remote_cpus = 0;
  absl::StatusOr<PlanCost> raw = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kRaw});
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->remote_s, 0);
  absl::StatusOr<PlanCost> off = EvaluatePlan(p, r, {0, 1}, {Stage::kRaw, Stage::kCropped});
  EXPECT_TRUE(std::isinf(off->remote_s));
  EXPECT_EQ(off->bottleneck, Resource::kRemoteCpu);
}

TEST(CostModelTest, RejectsMismatchedPlansAndUnknownSamples) {
  const DatasetProfile p = TwoSamples();
  const Resources r = SomeResources();
  EXPECT_EQ(EvaluatePlan(p, r, {0, 1}, {Stage::kRaw}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvaluatePlan(p, r, {0, 7}, {Stage::kRaw, Stage::kRaw}).status().code(),
            absl::StatusCode::kOutOfRange);
  Resources bad = r;
  bad.net_bytes_per_s = -1;
  EXPECT_EQ(EvaluatePlan(p, bad, {0}, {Stage::kRaw}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sophon
