#include "client/offload/smartoff_policy.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "sophon/data/cached_source.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kCrop = 32;
constexpr int kSamples = 1000;

// Every sample alike: a 100 KB file whose decode costs 4 ms here.
DatasetProfile UniformProfile() {
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "uniform";
  p.crop_size = kCrop;
  for (uint64_t i = 0; i < kSamples; ++i) {
    SampleProfile s;
    s.id = i;
    for (Stage stage : AllStages()) s.bytes[stage] = 100000;  // opaque stages: the file's size
    SetSizedStageBytes(kCrop, &s);
    s.client = testing::MakeOpTimes(0.004, 1e-5, 1e-4);
    p.samples.push_back(s);
  }
  return p;
}

Resources TestResources() {
  Resources r;
  r.net_bytes_per_s = 12.5e6;  // 100 Mbit/s
  r.remote_cpus = 2;
  r.remote_speed = 1;
  r.local_cpus = 2;
  r.gpu_seconds_per_batch = 0.01;
  r.batch_size = 32;
  return r;
}

// A policy on a fake clock, its epoch begun and the first 200 positions
// handed to the loader.
class SmartoffPolicyTest : public ::testing::Test {
 protected:
  void Start(double gpu_batch_seconds = 0.01, Resources resources = TestResources()) {
    SmartoffOptions options;
    options.gpu_batch_seconds = gpu_batch_seconds;
    options.replan_min_samples = 100;
    options.replan_threshold = 0.25;
    policy_ = std::make_unique<SmartoffPolicy>(UniformProfile(), resources, options, 1.0,
                                               [this] { return now_; });
    order_.resize(kSamples);
    std::iota(order_.begin(), order_.end(), 0);
    ASSERT_TRUE(policy_->BeginEpoch(0, order_).ok());
    std::vector<SampleAssignment> out(200);
    policy_->Plan(0, absl::MakeConstSpan(order_).subspan(0, 200), absl::MakeSpan(out));
  }

  // One arrival `seconds` after the previous one.
  void Arrive(uint64_t id, Stage stage, uint64_t bytes, double seconds, double server_s = 0) {
    now_ += absl::Seconds(seconds);
    SampleObservation obs;
    obs.id = id;
    obs.received = stage;
    obs.payload_bytes = bytes;
    obs.server_cpu_seconds = server_s;
    obs.server_wall_seconds = server_s;
    policy_->OnSample(obs);
  }

  // 101 RAW arrivals (the first starts the window) at `rate` bytes/s.
  void ArriveRawAt(double rate) {
    for (int i = 0; i <= 100; ++i) Arrive(i, kFirstStage, 100000, 100000 / rate);
  }

  absl::Time now_ = absl::UnixEpoch();
  std::vector<uint64_t> order_;
  std::unique_ptr<SmartoffPolicy> policy_;
};

// Samples the servers served from their sample cache are planned without a
// read: the next epoch's predicted storage time drops by their reads.
TEST_F(SmartoffPolicyTest, CacheHitsArePlannedWithoutARead) {
  Resources r = TestResources();
  r.remote_seconds_per_raw_byte = 1e-8;  // 1 ms per 100 KB file
  Start(0.01, r);
  for (uint64_t id = 0; id < 500; ++id) {
    SampleObservation obs;
    obs.id = id;
    obs.cache_hit = true;
    policy_->OnSample(obs);
  }
  EXPECT_EQ(policy_->cached_samples(), 500u);
  ASSERT_TRUE(policy_->BeginEpoch(1, order_).ok());
  // The plan's prediction is the cost of its stages with those 500 samples
  // cached: 500 reads fewer than the same stages without the cache.
  const PlanResult after = policy_->last_plan();
  DatasetProfile cached = UniformProfile();
  for (uint64_t id = 0; id < 500; ++id) cached.samples[id].cached = true;
  absl::StatusOr<PlanCost> with = EvaluatePlan(cached, policy_->resources(), order_, after.stages);
  absl::StatusOr<PlanCost> without =
      EvaluatePlan(UniformProfile(), policy_->resources(), order_, after.stages);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_NEAR(after.cost.remote_cpu_s, with->remote_cpu_s, 1e-9);
  EXPECT_NEAR(without->remote_cpu_s - with->remote_cpu_s, 500 * 100000 * 1e-8, 1e-9);
  // A later miss of a sample makes it cost its read again.
  SampleObservation miss;
  miss.id = 3;
  policy_->OnSample(miss);
  EXPECT_EQ(policy_->cached_samples(), 499u);
}

// A policy over UniformProfile at 100 Mbit/s with 2 storage CPUs: without a
// cache it offloads samples (RAW alone would need 8 s of link).
std::unique_ptr<SmartoffPolicy> CachePolicy(std::function<bool(uint64_t)> held,
                                            std::function<int64_t()> room,
                                            Resources resources = TestResources(),
                                            int64_t last_epoch = -1, bool outlives_job = false) {
  SmartoffOptions options;
  options.gpu_batch_seconds = 0.01;
  options.held_here = std::move(held);
  options.cache_room_bytes = std::move(room);
  options.last_epoch = last_epoch;
  options.cache_outlives_job = outlives_job;
  return std::make_unique<SmartoffPolicy>(UniformProfile(), resources, options, 1.0,
                                          [] { return absl::UnixEpoch(); });
}

// A slow link beside many storage CPUs: the plan offloads every sample.
Resources SlowLink() {
  Resources r = TestResources();
  r.net_bytes_per_s = 1.25e5;  // 1 Mbit/s
  r.remote_cpus = 64;
  return r;
}

TEST(SmartoffCacheTest, SamplesHeldHereArePlannedWithoutALink) {
  std::vector<uint64_t> order(kSamples);
  std::iota(order.begin(), order.end(), 0);
  std::unique_ptr<SmartoffPolicy> none = CachePolicy(nullptr, nullptr);
  ASSERT_TRUE(none->BeginEpoch(0, order).ok());
  std::unique_ptr<SmartoffPolicy> held =
      CachePolicy([](uint64_t id) { return id < kSamples / 2; }, nullptr);
  ASSERT_TRUE(held->BeginEpoch(0, order).ok());
  // Half the set here: less on the link and a faster predicted epoch.
  EXPECT_LT(held->last_plan().cost.wire_bytes, none->last_plan().cost.wire_bytes);
  EXPECT_LT(held->last_plan().cost.epoch_s, none->last_plan().cost.epoch_s);
  DatasetProfile profile = UniformProfile();
  for (uint64_t id = 0; id < kSamples / 2; ++id) profile.samples[id].held_here = true;
  absl::StatusOr<PlanCost> cost =
      EvaluatePlan(profile, held->resources(), order, held->last_plan().stages);
  ASSERT_TRUE(cost.ok());
  EXPECT_NEAR(held->last_plan().cost.epoch_s, cost->epoch_s, 1e-9);
}

TEST(SmartoffCacheTest, ACacheWithRoomIsFilledWithTheFirstSamplesNotHeld) {
  std::vector<uint64_t> order(kSamples);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  const int64_t per = 100000 + kCacheEntryOverheadBytes;
  auto held = [](uint64_t id) { return id == kSamples - 1; };
  // Without room nothing is fetched whole: the slow link makes the plan offload.
  std::unique_ptr<SmartoffPolicy> held_only = CachePolicy(held, nullptr, SlowLink());
  ASSERT_TRUE(held_only->BeginEpoch(0, order).ok());
  for (int p = 1; p < kSamples; ++p) {
    ASSERT_NE(held_only->last_plan().stages[p], kFirstStage) << "position " << p;
  }
  // Room for 10 samples; the first sample of the order (999) is held already.
  std::unique_ptr<SmartoffPolicy> policy = CachePolicy(held, [per] { return 10 * per; }, SlowLink());
  ASSERT_TRUE(policy->BeginEpoch(0, order).ok());
  std::vector<SampleAssignment> out(kSamples);
  policy->Plan(0, order, absl::MakeSpan(out));
  for (int p = 1; p <= 10; ++p) {
    EXPECT_EQ(out[p].stage, kFirstStage) << "position " << p << ": not fetched whole";
  }
  for (int p = 11; p < kSamples; ++p) {
    EXPECT_EQ(out[p].stage, held_only->last_plan().stages[p]) << "position " << p;
  }
  // The prediction is the cost of the stages as planned.
  DatasetProfile profile = UniformProfile();
  profile.samples[kSamples - 1].held_here = true;
  absl::StatusOr<PlanCost> cost =
      EvaluatePlan(profile, policy->resources(), order, policy->last_plan().stages);
  ASSERT_TRUE(cost.ok());
  EXPECT_NEAR(policy->last_plan().cost.epoch_s, cost->epoch_s, 1e-9);
  EXPECT_GT(policy->last_plan().cost.epoch_s, held_only->last_plan().cost.epoch_s)
      << "filling moves more bytes over the slow link this epoch";
  // The job's last epoch does not fill a cache that ends with the job, and
  // does fill one that outlives it (on disk).
  std::unique_ptr<SmartoffPolicy> last = CachePolicy(held, [per] { return 10 * per; }, SlowLink(),
                                                     /*last_epoch=*/0);
  ASSERT_TRUE(last->BeginEpoch(0, order).ok());
  EXPECT_EQ(last->last_plan().stages, held_only->last_plan().stages);
  std::unique_ptr<SmartoffPolicy> kept = CachePolicy(held, [per] { return 10 * per; }, SlowLink(),
                                                     /*last_epoch=*/0, /*outlives_job=*/true);
  ASSERT_TRUE(kept->BeginEpoch(0, order).ok());
  EXPECT_EQ(kept->last_plan().stages, policy->last_plan().stages);
  // No room: the plan is the one without filling.
  std::unique_ptr<SmartoffPolicy> full = CachePolicy(held, [] { return int64_t{0}; }, SlowLink());
  ASSERT_TRUE(full->BeginEpoch(0, order).ok());
  EXPECT_EQ(full->last_plan().stages, held_only->last_plan().stages);
}

TEST_F(SmartoffPolicyTest, FasterLinkTriggersOneNetworkReplan) {
  Start();
  ArriveRawAt(2 * 12.5e6);  // twice the assumed bandwidth
  policy_->OnStep(0.01);
  ASSERT_EQ(policy_->replans(), 1);
  const ReplanEvent event = policy_->replan_events()[0];
  EXPECT_EQ(event.reasons, std::vector<ReplanReason>{ReplanReason::kNetwork});
  EXPECT_EQ(event.position, 200);  // from the first position not yet requested
  EXPECT_NEAR(policy_->resources().net_bytes_per_s, 25e6, 1e3);
  policy_->OnStep(0.01);  // the window started over: nothing new to act on
  EXPECT_EQ(policy_->replans(), 1);
}

TEST_F(SmartoffPolicyTest, LinkWithinTheThresholdDoesNotReplan) {
  Start();
  ArriveRawAt(1.1 * 12.5e6);
  policy_->OnStep(0.01);
  EXPECT_EQ(policy_->replans(), 0);
  EXPECT_DOUBLE_EQ(policy_->resources().net_bytes_per_s, 12.5e6);
}

TEST_F(SmartoffPolicyTest, SlowerStorageNodeTriggersOneStorageReplan) {
  Start();
  const uint64_t bytes = static_cast<uint64_t>(StagePayloadBytes(Stage::kCropped, kCrop));
  // Cropped on the storage node in twice the profiled 4 ms, arriving at the
  // assumed link rate (so the link gives no reason).
  for (int i = 0; i <= 100; ++i) Arrive(i, Stage::kCropped, bytes, bytes / 12.5e6, 0.008);
  policy_->OnStep(0.01);
  ASSERT_EQ(policy_->replans(), 1);
  const ReplanEvent event = policy_->replan_events()[0];
  EXPECT_EQ(event.reasons, std::vector<ReplanReason>{ReplanReason::kStorageSpeed});
  EXPECT_NEAR(policy_->resources().remote_speed, 2.0, 1e-9);
}

TEST_F(SmartoffPolicyTest, StorageSpeedWithinTheThresholdDoesNotReplan) {
  Start();
  const uint64_t bytes = static_cast<uint64_t>(StagePayloadBytes(Stage::kCropped, kCrop));
  for (int i = 0; i <= 100; ++i) Arrive(i, Stage::kCropped, bytes, bytes / 12.5e6, 0.0044);
  policy_->OnStep(0.01);
  EXPECT_EQ(policy_->replans(), 0);
}

TEST_F(SmartoffPolicyTest, MeasuredStepTimeTriggersOneStepReplan) {
  Resources r = TestResources();
  r.gpu_seconds_per_batch = 0.1;
  Start(/*gpu_batch_seconds=*/-1, r);  // measure it
  for (int i = 0; i < 3; ++i) policy_->OnStep(0.5);
  EXPECT_EQ(policy_->replans(), 0);  // the first step is warm-up; three more decide
  policy_->OnStep(0.5);
  ASSERT_EQ(policy_->replans(), 1);
  EXPECT_EQ(policy_->replan_events()[0].reasons,
            std::vector<ReplanReason>{ReplanReason::kStepTime});
  EXPECT_DOUBLE_EQ(policy_->resources().gpu_seconds_per_batch, 0.5);
  for (int i = 0; i < 3; ++i) policy_->OnStep(0.5);  // now as assumed
  EXPECT_EQ(policy_->replans(), 1);
}

TEST_F(SmartoffPolicyTest, AFirstPlanWithoutAStepIsPredictedAgainOnceStepsAreTimed) {
  Resources r = TestResources();
  r.gpu_seconds_per_batch = 0;  // nothing given, nothing measured before the epoch
  Start(/*gpu_batch_seconds=*/-1, r);
  const double first = policy_->PredictedEpochSeconds();
  // The first four steps, 0.5 s each, take 2 s of the epoch.
  for (int i = 0; i < 4; ++i) {
    now_ += absl::Seconds(0.5);
    policy_->OnStep(0.5);
  }
  ASSERT_EQ(policy_->replans(), 1);
  // The epoch is 32 batches of 32 (1000 samples); four steps are done, 28
  // are left, 0.5 s each: more than the re-planned 800 positions' cost (25
  // steps), as the 200 positions handed out before are not in it.
  const double rest = policy_->last_plan().cost.epoch_s;
  EXPECT_GE(rest, 25 * 0.5);
  EXPECT_LT(rest, 28 * 0.5);
  EXPECT_DOUBLE_EQ(policy_->PredictedEpochSeconds(), 2.0 + 28 * 0.5);
  EXPECT_GT(policy_->PredictedEpochSeconds(), 2 * first);
}

TEST_F(SmartoffPolicyTest, AStepReplanOfAKnownStepKeepsTheFirstPrediction) {
  Resources r = TestResources();
  r.gpu_seconds_per_batch = 0.1;
  Start(/*gpu_batch_seconds=*/-1, r);
  const double first = policy_->PredictedEpochSeconds();
  for (int i = 0; i < 4; ++i) policy_->OnStep(0.5);
  ASSERT_EQ(policy_->replans(), 1);
  EXPECT_DOUBLE_EQ(policy_->PredictedEpochSeconds(), first);
}

TEST_F(SmartoffPolicyTest, StepTimeWithinTheThresholdDoesNotReplan) {
  Resources r = TestResources();
  r.gpu_seconds_per_batch = 0.5;
  Start(/*gpu_batch_seconds=*/-1, r);
  for (int i = 0; i < 8; ++i) policy_->OnStep(0.55);
  EXPECT_EQ(policy_->replans(), 0);
}

// Epochs on one training core and one storage core behind a fast link (the
// plan splits the 4 s of decoding between the two cores). RunEpoch: `steps`
// steps, the loop waiting `wait_share` of the epoch for data, `bytes`
// received (and `server_s` of storage node work), the last step ending `ran`
// seconds after the epoch began; then the next epoch begins.
class LocalSpeedTest : public SmartoffPolicyTest {
 protected:
  void StartOnOneCore() {
    Resources r = TestResources();
    r.net_bytes_per_s = 1e9;
    r.local_cpus = 1;
    r.remote_cpus = 1;
    Start(0.01, r);
    predicted_local_s_ = policy_->last_plan().cost.local_s;
    ASSERT_GT(predicted_local_s_, 1.5);  // every test's epoch runs >= 1 s
  }
  // 1000 samples: 31 full batches of 32.
  void RunEpoch(double ran, double wait_share = 0.7, uint64_t bytes = 0, double server_s = 0,
                int steps = 31) {
    const absl::Time start = now_;
    if (bytes > 0 || server_s > 0) {
      const uint64_t cropped = static_cast<uint64_t>(StagePayloadBytes(Stage::kCropped, kCrop));
      Arrive(0, Stage::kCropped, cropped, 0);  // starts the window
      Arrive(1, Stage::kCropped, bytes, 0, server_s);
    }
    for (int i = 0; i < steps; ++i) {
      now_ = start + absl::Seconds(ran * (i + 1) / steps);
      policy_->OnDataWait(wait_share * ran / steps);
      policy_->OnStep(0.001);
    }
    ASSERT_TRUE(policy_->BeginEpoch(++epoch_, order_).ok());
  }
  double speed() const { return policy_->resources().local_speed; }
  double predicted_local_s_ = 0;
  uint64_t epoch_ = 0;
};

TEST_F(LocalSpeedTest, ALongerEpochWaitingForDataWithTheLinkAndStorageIdleSlowsIt) {
  StartOnOneCore();
  const double first = policy_->PredictedEpochSeconds();
  RunEpoch(1.5 * predicted_local_s_);
  EXPECT_NEAR(speed(), 1.5, 1e-9);
  // The next plan knows: its prediction is longer (the planner moves what it
  // can to the storage node, so by less than 1.5x).
  EXPECT_GT(policy_->PredictedEpochSeconds(), first * 1.05);
  EXPECT_LE(policy_->PredictedEpochSeconds(), first * 1.5 + 1e-9);
}

TEST_F(LocalSpeedTest, AShorterEpochSpeedsItUp) {
  StartOnOneCore();
  RunEpoch(0.8 * predicted_local_s_);
  EXPECT_NEAR(speed(), 0.8, 1e-9);
}

TEST_F(LocalSpeedTest, OneEpochChangesItAtMostTwofold) {
  StartOnOneCore();
  RunEpoch(3 * predicted_local_s_);
  EXPECT_DOUBLE_EQ(speed(), 2.0);
}

TEST_F(LocalSpeedTest, ABusyLinkTakesTheBlame) {
  StartOnOneCore();
  const double ran = 1.5 * predicted_local_s_;
  RunEpoch(ran, 0.7, static_cast<uint64_t>(0.95 * 1e9 * ran));
  EXPECT_DOUBLE_EQ(speed(), 1.0);
}

TEST_F(LocalSpeedTest, ABusyStorageNodeTakesTheBlame) {
  StartOnOneCore();
  const double ran = 1.5 * predicted_local_s_;
  RunEpoch(ran, 0.7, 1000, 0.95 * ran);  // its one CPU, 95% busy
  EXPECT_DOUBLE_EQ(speed(), 1.0);
  // The same epoch with the storage node half as busy: the training node's.
  RunEpoch(ran, 0.7, 1000, 0.5 * ran);
  EXPECT_GT(speed(), 1.2);
}

TEST_F(LocalSpeedTest, ALoopThatHardlyWaitedForDataSetItsOwnPace) {
  StartOnOneCore();
  RunEpoch(1.5 * predicted_local_s_, /*wait_share=*/0.05);
  EXPECT_DOUBLE_EQ(speed(), 1.0);
}

TEST_F(LocalSpeedTest, AnEpochNotRunToItsEndSaysNothing) {
  StartOnOneCore();
  RunEpoch(1.5 * predicted_local_s_, 0.7, 0, 0, /*steps=*/30);
  EXPECT_DOUBLE_EQ(speed(), 1.0);
}

TEST_F(LocalSpeedTest, AReplannedEpochSaysNothing) {
  StartOnOneCore();
  ArriveRawAt(2e9);  // twice the assumed bandwidth: the next step re-plans
  policy_->OnStep(0.001);
  ASSERT_EQ(policy_->replans(), 1);
  RunEpoch(1.5 * predicted_local_s_, 0.7, 0, 0, /*steps=*/30);  // 31 with the one above
  EXPECT_DOUBLE_EQ(speed(), 1.0);
}

// An epoch held back by something the checks do not see (here: always the
// same length) raises the speed once; the next, with less work planned here,
// takes as long: the rise is undone and not made again.
TEST_F(LocalSpeedTest, ARiseThatChangedNothingIsUndoneForGood) {
  StartOnOneCore();
  const double ran = 1.5 * predicted_local_s_;
  RunEpoch(ran);
  EXPECT_NEAR(speed(), 1.5, 1e-9);
  RunEpoch(ran);
  EXPECT_DOUBLE_EQ(speed(), 1.0);
  for (int i = 0; i < 3; ++i) {
    RunEpoch(ran);
    EXPECT_DOUBLE_EQ(speed(), 1.0);
  }
  RunEpoch(0.8 * predicted_local_s_);  // evidence of a faster node still counts
  EXPECT_NEAR(speed(), 0.8, 1e-9);
}

// The work a rise moves off this node can make the link busy without making
// the epoch any shorter: the rise is undone all the same (the busy link does
// not take the blame for an epoch the rise itself made what it is).
TEST_F(LocalSpeedTest, ARiseThatOnlyMadeTheLinkBusyIsUndone) {
  StartOnOneCore();
  const double ran = 1.5 * predicted_local_s_;
  RunEpoch(ran);
  ASSERT_NEAR(speed(), 1.5, 1e-9);
  RunEpoch(ran, 0.7, static_cast<uint64_t>(0.95 * 1e9 * ran));
  EXPECT_DOUBLE_EQ(speed(), 1.0);
}

// A rise after which the epoch did take less time stands.
TEST_F(LocalSpeedTest, ARiseThatHelpedStands) {
  StartOnOneCore();
  const double ran = 1.5 * predicted_local_s_;
  RunEpoch(ran);
  const double raised = speed();
  ASSERT_NEAR(raised, 1.5, 1e-9);
  // The new plan's share here, and the epoch runs just that long.
  const double local = policy_->last_plan().cost.local_s;
  ASSERT_LT(local, 0.98 * ran);
  RunEpoch(local);
  EXPECT_DOUBLE_EQ(speed(), raised);
}

TEST_F(SmartoffPolicyTest, ReplanReachesOnlyPositionsNotYetRequested) {
  Start();
  std::vector<SampleAssignment> before(kSamples - 200);
  policy_->Plan(200, absl::MakeConstSpan(order_).subspan(200), absl::MakeSpan(before));
  // Everything was handed out: a drift re-plans nothing.
  ArriveRawAt(2 * 12.5e6);
  policy_->OnStep(0.01);
  EXPECT_EQ(policy_->replans(), 0);
}

// sophon-train measures the step before training (MeasureTrainingStep) and
// hands it over in SmartoffOptions.measured_gpu_batch_seconds.
class FirstPlanTest : public ::testing::Test {
 protected:
  Resources FirstResources(const SmartoffOptions& options) {
    StorageMeasurement measured;
    measured.server.net_bytes_per_s = 12.5e6;
    measured.server.remote_cpus = 2;
    LoaderOptions loader;
    loader.workers = 2;
    loader.batch_size = 32;
    return FirstPlanResources(measured, 1.0, loader, options);
  }

  // The policy of `options`, its epoch of every sample begun and the first
  // 200 positions handed out.
  std::unique_ptr<SmartoffPolicy> Begin(const SmartoffOptions& options) {
    const Resources r = FirstResources(options);
    EXPECT_TRUE(r.Validate().ok()) << r.Validate();
    auto policy = std::make_unique<SmartoffPolicy>(UniformProfile(), r, options);
    order_.resize(kSamples);
    std::iota(order_.begin(), order_.end(), 0);
    EXPECT_TRUE(policy->BeginEpoch(0, order_).ok());
    std::vector<SampleAssignment> out(200);
    policy->Plan(0, absl::MakeConstSpan(order_).subspan(0, 200), absl::MakeSpan(out));
    return policy;
  }

  std::vector<uint64_t> order_;
};

TEST_F(FirstPlanTest, MeasuredStepPlansTheFirstEpochAndTheStepsStillCheckIt) {
  SmartoffOptions options;
  options.gpu_batch_seconds = -1;
  options.measured_gpu_batch_seconds = 0.5;
  std::unique_ptr<SmartoffPolicy> policy = Begin(options);
  EXPECT_DOUBLE_EQ(policy->resources().gpu_seconds_per_batch, 0.5);
  // 1000 samples in batches of 32: 32 steps of 0.5 s, far above the rest.
  EXPECT_DOUBLE_EQ(policy->PredictedEpochSeconds(), 16.0);
  EXPECT_EQ(policy->last_plan().cost.bottleneck, Resource::kGpu);
  // Steps within the threshold of the measurement: no re-plan.
  for (int i = 0; i < 4; ++i) policy->OnStep(0.55);
  EXPECT_EQ(policy->replans(), 0);
  // Twice as long: the steps are still measured, and they win.
  for (int i = 0; i < 4; ++i) policy->OnStep(1.0);
  ASSERT_EQ(policy->replans(), 1);
  EXPECT_EQ(policy->replan_events()[0].reasons,
            std::vector<ReplanReason>{ReplanReason::kStepTime});
  EXPECT_DOUBLE_EQ(policy->resources().gpu_seconds_per_batch, 1.0);
}

TEST_F(FirstPlanTest, AGivenStepTimeWinsAndIsNotRemeasured) {
  SmartoffOptions options;
  options.gpu_batch_seconds = 0.2;
  options.measured_gpu_batch_seconds = 0.5;  // ignored
  std::unique_ptr<SmartoffPolicy> policy = Begin(options);
  EXPECT_DOUBLE_EQ(policy->resources().gpu_seconds_per_batch, 0.2);
  for (int i = 0; i < 8; ++i) policy->OnStep(1.0);
  EXPECT_EQ(policy->replans(), 0);
}

TEST_F(FirstPlanTest, WithoutAMeasurementTheFirstPlanAssumesNoStepTime) {
  SmartoffOptions options;  // gpu_batch_seconds -1, nothing measured
  EXPECT_DOUBLE_EQ(options.FirstPlanStepSeconds(), 0);
  EXPECT_DOUBLE_EQ(FirstResources(options).gpu_seconds_per_batch, 0);
}

TEST_F(FirstPlanTest, SeveralRanksTakeTheirPartOfTheServerAndTheLink) {
  SmartoffOptions options;
  options.gpu_batch_seconds = 0.01;
  const Resources alone = FirstResources(options);
  StorageMeasurement measured;
  measured.server.net_bytes_per_s = 12.5e6;
  measured.server.remote_cpus = 2;
  LoaderOptions loader;
  loader.workers = 2;
  loader.batch_size = 32;
  loader.world = 4;
  options.local_world_size = 2;
  const Resources shared = FirstPlanResources(measured, 1.0, loader, options);
  EXPECT_DOUBLE_EQ(shared.remote_cpus, alone.remote_cpus / 4);
  EXPECT_DOUBLE_EQ(shared.net_bytes_per_s, alone.net_bytes_per_s / 2);
  EXPECT_LE(shared.local_cpus, alone.local_cpus);
}

// A rank beside others on one storage server: each epoch's start asks the
// server's counters (faked here) and plans with what the others leave.
class SharedServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<SmartoffPolicy> Make(double remote_cpus, bool with_load = true) {
    SmartoffOptions options;
    options.gpu_batch_seconds = 0.01;
    if (with_load) options.server_load = [this] { return load_; };
    Resources r = TestResources();
    r.remote_cpus = remote_cpus;
    order_.resize(kSamples);
    std::iota(order_.begin(), order_.end(), 0);
    return std::make_unique<SmartoffPolicy>(UniformProfile(), r, options, 1.0,
                                            [this] { return now_; });
  }
  // `seconds` pass; this rank's samples cost the server `own_s`, and the
  // server counts `others_s` more for the other clients.
  void RunEpoch(SmartoffPolicy* policy, double seconds, double own_s, double others_s) {
    const int n = 10;
    for (int i = 0; i < n; ++i) {
      SampleObservation obs;
      obs.id = static_cast<uint64_t>(i);
      obs.received = Stage::kCropped;
      obs.payload_bytes = 1000;
      obs.server_wall_seconds = own_s / n;
      obs.server_cpu_seconds = own_s / n;
      policy->OnSample(obs);
    }
    load_.sample_wall_seconds += own_s + others_s;
    load_.sample_cpu_seconds += own_s + others_s;
    now_ += absl::Seconds(seconds);
  }
  ServerLoad load_;
  absl::Time now_ = absl::UnixEpoch();
  std::vector<uint64_t> order_;
};

TEST_F(SharedServerTest, PlansWithThePartOfTheWorkerTheOthersLeave) {
  load_.whole_cpus = 1;
  load_.competitors = 2;
  std::unique_ptr<SmartoffPolicy> policy = Make(0.5);  // the first plan's part of two ranks
  ASSERT_TRUE(policy->BeginEpoch(0, order_).ok());
  EXPECT_DOUBLE_EQ(policy->resources().remote_cpus, 0.5);
  // The other rank kept the worker busy half of the 10 s.
  RunEpoch(policy.get(), 10, 5, 5);
  ASSERT_TRUE(policy->BeginEpoch(1, order_).ok());
  EXPECT_DOUBLE_EQ(policy->resources().remote_cpus, 0.5);
  // It needed less (2 s of 10): the rest is this rank's.
  RunEpoch(policy.get(), 10, 6, 2);
  ASSERT_TRUE(policy->BeginEpoch(2, order_).ok());
  EXPECT_NEAR(policy->resources().remote_cpus, 0.8, 1e-9);
  // It wanted more than its turn: this rank still gets an equal one.
  RunEpoch(policy.get(), 10, 3, 9);
  ASSERT_TRUE(policy->BeginEpoch(3, order_).ok());
  EXPECT_DOUBLE_EQ(policy->resources().remote_cpus, 0.5);
  // It left (this rank alone): the whole worker.
  load_.competitors = 1;
  RunEpoch(policy.get(), 10, 6, 0);
  ASSERT_TRUE(policy->BeginEpoch(4, order_).ok());
  EXPECT_DOUBLE_EQ(policy->resources().remote_cpus, 1);
}

TEST_F(SharedServerTest, AServerThatDoesNotCountItsSamplesKeepsTheFirstPlansPart) {
  load_.whole_cpus = 1;
  load_.competitors = 2;
  std::unique_ptr<SmartoffPolicy> policy = Make(0.5);
  ASSERT_TRUE(policy->BeginEpoch(0, order_).ok());
  RunEpoch(policy.get(), 10, 5, 0);
  load_.sample_wall_seconds = 0;  // an older server: the counters stay 0
  load_.sample_cpu_seconds = 0;
  ASSERT_TRUE(policy->BeginEpoch(1, order_).ok());
  EXPECT_DOUBLE_EQ(policy->resources().remote_cpus, 0.5);
}

TEST_F(SharedServerTest, ARankAloneOnTheServerPlansExactlyAsWithoutTheCounters) {
  load_.whole_cpus = 2;
  load_.competitors = 1;
  std::unique_ptr<SmartoffPolicy> counted = Make(2);
  std::unique_ptr<SmartoffPolicy> plain = Make(2, /*with_load=*/false);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    ASSERT_TRUE(counted->BeginEpoch(epoch, order_).ok());
    ASSERT_TRUE(plain->BeginEpoch(epoch, order_).ok());
    EXPECT_DOUBLE_EQ(counted->resources().remote_cpus, 2);
    EXPECT_EQ(counted->last_plan().stages, plain->last_plan().stages);
    EXPECT_DOUBLE_EQ(counted->PredictedEpochSeconds(), plain->PredictedEpochSeconds());
    RunEpoch(counted.get(), 10, 4, 0.01);  // a little read and send the server counts
  }
}

TEST(SmartoffOptionsTest, ValidateNamesTheOption) {
  SmartoffOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.replan_threshold = 0;
  EXPECT_NE(o.Validate().message().find("SmartoffOptions.replan_threshold"), std::string::npos);
  o = SmartoffOptions();
  o.replan_min_samples = 0;
  EXPECT_NE(o.Validate().message().find("SmartoffOptions.replan_min_samples"), std::string::npos);
  o = SmartoffOptions();
  o.measured_gpu_batch_seconds = -1;
  EXPECT_NE(o.Validate().message().find("SmartoffOptions.measured_gpu_batch_seconds"),
            std::string::npos);
  o = SmartoffOptions();
  o.local_world_size = 0;
  EXPECT_NE(o.Validate().message().find("SmartoffOptions.local_world_size"), std::string::npos);
  // Infinities and NaNs are refused by name, whatever the field's range.
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto [field, set] : std::vector<std::pair<std::string, std::function<void(double)>>>{
           {"net_bw_mbit", [&](double v) { o.net_bw_mbit = v; }},
           {"remote_cpus", [&](double v) { o.remote_cpus = v; }},
           {"replan_threshold", [&](double v) { o.replan_threshold = v; }},
           {"gpu_batch_seconds", [&](double v) { o.gpu_batch_seconds = v; }}}) {
    for (double bad : {inf, -inf, nan}) {
      o = SmartoffOptions();
      set(bad);
      const absl::Status s = o.Validate();
      EXPECT_NE(s.message().find("SmartoffOptions." + field + " must be a finite number"),
                std::string::npos)
          << field << " = " << bad << ": " << s;
    }
  }
}

}  // namespace
}  // namespace sophon
