#include "sophon/planning/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "sophon/planning/optimal_planner.h"
#include "sophon/planning/sophon_heuristic.h"

namespace sophon {
namespace {

SampleProfile Sample(uint64_t id, uint64_t raw, uint64_t cropped, uint64_t tensor,
                     double decode_crop, double flip, double tensor_s) {
  SampleProfile s;
  s.id = id;
  s.bytes[Stage::kRaw] = raw;
  s.bytes[Stage::kCropped] = cropped;
  s.bytes[Stage::kFlipped] = cropped;
  s.bytes[Stage::kTensor] = tensor;
  s.bytes[Stage::kJpegCrop] = raw;
  s.client = testing::MakeOpTimes(decode_crop, flip, tensor_s);
  return s;
}

// Sizes and times shaped like ImageNet-style JPEGs at S = 224, with a spread
// of raw sizes on both sides of the CROPPED size.
DatasetProfile RandomProfile(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "random";
  for (int i = 0; i < n; ++i) {
    const uint64_t raw = 20000 + static_cast<uint64_t>(u(rng) * 600000);
    const double decode = 1e-3 + 2e-8 * static_cast<double>(raw) * (0.5 + u(rng));
    p.samples.push_back(
        Sample(i, raw, 150528, 602112, decode, 2e-5 * (0.5 + u(rng)), 4e-4 * (0.5 + u(rng))));
  }
  return p;
}

// RandomProfile with a measured lossless crop: the region a random part of
// the file, the crop cheaper or dearer than a decode, the region's decode
// cheaper than the file's (so remote + local differs between stages).
DatasetProfile RandomProfileWithJpegCrop(int n, uint64_t seed) {
  DatasetProfile p = RandomProfile(n, seed);
  p.stages = StageSet::BeforeFeatures();
  std::mt19937_64 rng(seed + 1000);
  std::uniform_real_distribution<double> u(0, 1);
  for (SampleProfile& s : p.samples) {
    s.bytes[Stage::kJpegCrop] =
        1 + static_cast<uint64_t>(static_cast<double>(s.bytes[Stage::kRaw]) * (0.2 + 0.7 * u(rng)));
    s.client[Op::kJpegCrop] = s.client[Op::kDecodeCrop] * (0.3 + 1.2 * u(rng));
    s.client[Op::kDecodeJpegCrop] = s.client[Op::kDecodeCrop] * (0.4 + 0.6 * u(rng));
  }
  return p;
}

Resources Net(double bytes_per_s, double remote_cpus, double local_cpus) {
  Resources r;
  r.net_bytes_per_s = bytes_per_s;
  r.remote_cpus = remote_cpus;
  r.local_cpus = local_cpus;
  return r;
}

PlanResult Plan(PlannerKind kind, const DatasetProfile& p, const Resources& r) {
  absl::StatusOr<PlanResult> result = MakePlan(kind, p, r, AllSampleIds(p));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : PlanResult{};
}

uint64_t MinBytes(const SampleProfile& s) {
  return std::min({s.bytes[Stage::kRaw], s.bytes[Stage::kCropped], s.bytes[Stage::kFlipped], s.bytes[Stage::kTensor]});
}

TEST(PlannerTest, AmpleStorageCpusPutEverySampleAtItsSmallestStage) {
  const DatasetProfile p = RandomProfile(500, 1);
  // Slow network, storage CPUs to spare, enough local CPU for the rest.
  const PlanResult r = Plan(PlannerKind::kOptimal, p, Net(1e6, 1e6, 8));
  uint64_t min_total = 0;
  for (size_t i = 0; i < p.samples.size(); ++i) {
    EXPECT_EQ(p.samples[i].bytes[r.stages[i]], MinBytes(p.samples[i])) << "sample " << i;
    min_total += MinBytes(p.samples[i]);
  }
  EXPECT_EQ(r.cost.wire_bytes, min_total);
  EXPECT_EQ(r.cost.bottleneck, Resource::kNetwork);
  EXPECT_GT(r.cost.samples_per_stage[0], 0);  // small JPEGs stay RAW
  EXPECT_DOUBLE_EQ(r.lower_bound_s, r.cost.epoch_s);
}

TEST(PlannerTest, NoPlanGoesPastTheTargetStage) {
  DatasetProfile p = RandomProfileWithJpegCrop(300, 7);
  p.target = Stage::kFlipped;
  EXPECT_FALSE(p.Validate().ok()) << "stages past the target must be refused";
  p.stages.Remove(Stage::kTensor);
  ASSERT_TRUE(p.Validate().ok());
  double tensor_s = 0;
  for (const SampleProfile& s : p.samples) tensor_s += s.client[Op::kTensor];
  for (PlannerKind kind : {PlannerKind::kOptimal, PlannerKind::kSophon, PlannerKind::kNoOff,
                           PlannerKind::kAllOff}) {
    // A fast link, idle storage CPUs and a slow local CPU: without the
    // target every sample would go at TENSOR (checked below); with it, no plan
    // goes past FLIPPED.
    const Resources net = Net(1e12, 1e6, 0.01);
    const PlanResult r = Plan(kind, p, net);
    EXPECT_EQ(r.cost.samples_per_stage[StageIndex(Stage::kTensor)], 0) << PlannerKindName(kind);
    DatasetProfile whole = p;
    whole.target = kLastStage;
    whole.stages = StageSet::BeforeFeatures();
    const PlanResult full = Plan(kind, whole, net);
    if (kind == PlannerKind::kAllOff || kind == PlannerKind::kOptimal) {
      EXPECT_EQ(r.cost.samples_per_stage[StageIndex(Stage::kFlipped)], 300)
          << PlannerKindName(kind);
      EXPECT_DOUBLE_EQ(r.cost.local_cpu_s, 0);  // nothing left for this CPU
      EXPECT_EQ(full.cost.samples_per_stage[StageIndex(Stage::kTensor)], 300)
          << PlannerKindName(kind);
    }
    if (kind == PlannerKind::kNoOff) {
      // Every op but the tensor op on this node.
      EXPECT_NEAR(full.cost.local_cpu_s - r.cost.local_cpu_s, tensor_s, 1e-6);
    }
  }
}

TEST(PlannerTest, NoStorageCpuMeansAllRaw) {
  const DatasetProfile p = RandomProfile(300, 2);
  for (double remote_cpus : {0.0, 1e-9}) {
    for (PlannerKind kind : {PlannerKind::kOptimal, PlannerKind::kSophon}) {
      const PlanResult r = Plan(kind, p, Net(1e6, remote_cpus, 2));
      EXPECT_EQ(r.cost.samples_per_stage[0], 300)
          << PlannerKindName(kind) << " with " << remote_cpus << " storage CPUs";
      EXPECT_EQ(r.cost.remote_s, 0);
    }
  }
}

TEST(PlannerTest, GpuBoundPlanPredictsTheGpuTime) {
  const DatasetProfile p = RandomProfile(1000, 3);
  Resources r = Net(125e6, 4, 4);
  r.batch_size = 100;
  r.gpu_seconds_per_batch = 50;  // 10 batches: 500 s, far above any data time
  const PlanResult opt = Plan(PlannerKind::kOptimal, p, r);
  EXPECT_DOUBLE_EQ(opt.cost.epoch_s, 500);
  EXPECT_EQ(opt.cost.bottleneck, Resource::kGpu);
  EXPECT_DOUBLE_EQ(opt.lower_bound_s, 500);
  // Among the plans that all take 500 s it keeps the most headroom: no plan
  // has a smaller largest data time.
  const double data_max = std::max({opt.cost.net_s, opt.cost.remote_s, opt.cost.local_s});
  for (PlannerKind kind :
       {PlannerKind::kNoOff, PlannerKind::kResizeOff, PlannerKind::kAllOff, PlannerKind::kSophon}) {
    const PlanResult other = Plan(kind, p, r);
    EXPECT_LE(data_max,
              std::max({other.cost.net_s, other.cost.remote_s, other.cost.local_s}) * (1 + 1e-12));
  }
}

// Worked by hand. 1000 B/s network, 1 storage CPU, plenty of local CPU.
//   sample  raw   smallest stage     saved  cost   saved/cost  rank
//   0 A     1000  CROPPED 400        600    0.1 s  6000        2
//   1 B     1000  CROPPED 200        800    0.4 s  2000        3
//   2 C      500  CROPPED 400        100    3.0 s    33.3      4
//   3 D      300  none (400 > 300)     0    -         0        -
//   4 E      400  CROPPED 350         50    2.0 s    25        5
//   5 F     5000  TENSOR 2000       3000    0.3 s 10000        1
// Start: 8200 B = 8.2 s on the wire. F -> net 5.2 s, remote 0.3 s: offload.
// A -> 4.6 / 0.4: offload. B -> 3.8 / 0.8: offload. C -> 3.7 < 3.8: stop,
// C stays RAW, and so do E (which alone would still fit) and D.
TEST(SophonPlannerTest, HandWorkedExample) {
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "hand";
  p.samples = {
      Sample(0, 1000, 400, 1600, 0.1, 0.01, 0.01), Sample(1, 1000, 200, 800, 0.4, 0.01, 0.01),
      Sample(2, 500, 400, 1600, 3.0, 0.01, 0.01),  Sample(3, 300, 400, 1600, 0.1, 0.01, 0.01),
      Sample(4, 400, 350, 1400, 2.0, 0.01, 0.01),  Sample(5, 5000, 3000, 2000, 0.1, 0.1, 0.1),
  };
  const std::vector<Stage> expected = {Stage::kCropped, Stage::kCropped, Stage::kRaw,
                                       Stage::kRaw,     Stage::kRaw,     Stage::kTensor};
  const Resources r = Net(1000, 1, 100);
  EXPECT_EQ(PlanSophon(p, r, AllSampleIds(p)), expected);
  const PlanResult result = Plan(PlannerKind::kSophon, p, r);
  EXPECT_EQ(result.stages, expected);
  EXPECT_EQ(result.cost.wire_bytes, 3800u);
  EXPECT_NEAR(result.cost.remote_s, 0.8, 1e-12);
  // Over a subset in another order the same rule applies to those samples:
  // E and B start at 1.4 s; B -> 1.2 / 0.4: offload; E -> 1.15 < 2.4: stop.
  EXPECT_EQ(PlanSophon(p, r, {4, 1}), (std::vector<Stage>{Stage::kRaw, Stage::kCropped}));
}

// Ten identical samples: 1000 B raw, 100 B cropped, 1 s to crop. Offloading m
// of them: T_net = 10 - 0.9 m, T_remote = m (1 CPU). m = 5 gives max(5.5, 5);
// m = 6 gives 6. The LP optimum is m = 10 / 1.9.
TEST(PlannerTest, StorageCpuBudgetIsRespected) {
  DatasetProfile p;
  p.stages = testing::StagesWithoutJpegCrop();
  p.dataset = "budget";
  for (int i = 0; i < 10; ++i) p.samples.push_back(Sample(i, 1000, 100, 400, 1.0, 0, 0));
  const Resources r = Net(1000, 1, 100);
  for (PlannerKind kind : {PlannerKind::kOptimal, PlannerKind::kSophon}) {
    const PlanResult result = Plan(kind, p, r);
    EXPECT_EQ(result.cost.samples_per_stage[0], 5) << PlannerKindName(kind);
    EXPECT_EQ(result.cost.samples_per_stage[StageIndex(Stage::kCropped)], 5) << PlannerKindName(kind);
    EXPECT_DOUBLE_EQ(result.cost.remote_s, 5);
    EXPECT_DOUBLE_EQ(result.cost.epoch_s, 5.5);
    EXPECT_NEAR(result.lower_bound_s, 10 / 1.9, 1e-9);
  }
}

// Local CPUs can be the bottleneck too: with a fast network and one slow
// local worker the optimal plan moves work to the storage node even though
// TENSOR is the largest payload.
TEST(PlannerTest, SlowLocalCpuPushesWorkToTheStorageNode) {
  const DatasetProfile p = RandomProfile(400, 4);
  const Resources r = Net(10e9, 16, 0.25);
  const PlanResult opt = Plan(PlannerKind::kOptimal, p, r);
  const PlanResult nooff = Plan(PlannerKind::kNoOff, p, r);
  const PlanResult sophon = Plan(PlannerKind::kSophon, p, r);
  EXPECT_GT(opt.cost.samples_per_stage[StageIndex(Stage::kTensor)], 0);
  EXPECT_LT(opt.cost.epoch_s, 0.5 * nooff.cost.epoch_s);
  EXPECT_LT(opt.cost.epoch_s, sophon.cost.epoch_s);
}

// The largest time any single sample's move between stages can add.
double OneSampleSlack(const DatasetProfile& p, const Resources& r) {
  double slack = 0;
  for (const SampleProfile& s : p.samples) {
    const double ops = s.client[Op::kDecodeCrop] + s.client[Op::kFlip] + s.client[Op::kTensor];
    const double bytes =
        static_cast<double>(std::max({s.bytes[Stage::kRaw], s.bytes[Stage::kCropped], s.bytes[Stage::kTensor]}));
    slack = std::max(
        {slack, bytes / r.net_bytes_per_s,
         (ops * r.remote_speed + bytes * r.remote_seconds_per_wire_byte) / r.remote_cpus,
         (ops + bytes * r.local_seconds_per_wire_byte) / r.local_cpus});
  }
  return slack;
}

// Per-byte costs of reading, sending and receiving, up to 10 ns per byte
// (about a millisecond for a 100 KB sample: the order of its ops).
void AddRandomByteCosts(Resources* r, double a, double b, double c) {
  r->remote_seconds_per_raw_byte = 1e-8 * a;
  r->remote_seconds_per_wire_byte = 1e-8 * b;
  r->local_seconds_per_wire_byte = 1e-8 * c;
}

TEST(PlannerTest, OptimalIsNeverWorseThanAnyOtherPlannerAndNearItsBound) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 1 + static_cast<int>(u(rng) * 400);
    const DatasetProfile p = RandomProfile(n, 100 + trial);
    Resources r =
        Net(std::pow(10, 5 + 4 * u(rng)), std::floor(u(rng) * 9), 1 + std::floor(u(rng) * 8));
    r.remote_speed = 0.5 + 2 * u(rng);
    if (trial % 2) AddRandomByteCosts(&r, u(rng), u(rng), u(rng));
    r.batch_size = 32;
    r.gpu_seconds_per_batch = u(rng) < 0.3 ? 0.05 * u(rng) : 0;
    absl::StatusOr<std::vector<PlanResult>> all = MakeAllPlans(p, r, AllSampleIds(p));
    ASSERT_TRUE(all.ok()) << all.status();
    const PlanResult& opt = all->back();
    ASSERT_EQ(opt.kind, PlannerKind::kOptimal);
    for (const PlanResult& other : *all) {
      EXPECT_LE(opt.cost.epoch_s, other.cost.epoch_s * (1 + 1e-12))
          << "trial " << trial << " vs " << PlannerKindName(other.kind);
      EXPECT_LE(other.lower_bound_s, other.cost.epoch_s) << "trial " << trial;
    }
    if (r.remote_cpus > 0) {
      EXPECT_LE(opt.cost.epoch_s, opt.lower_bound_s + OneSampleSlack(p, r) + 1e-12)
          << "trial " << trial;
    }
  }
}

// On tiny profiles every plan can be tried: the bound must hold for all of
// them, and the planner must be within one sample's move of the best.
TEST(PlannerTest, LowerBoundHoldsAgainstExhaustiveSearch) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  int exact = 0;
  constexpr int kTrials = 40;
  for (int trial = 0; trial < kTrials; ++trial) {
    // Half the trials offer the lossless crop, whose samples' total CPU work
    // depends on the stage: the bound is then the relaxed one, still a bound.
    const int n = 1 + trial % 5;
    const DatasetProfile p = trial % 4 < 2 ? RandomProfileWithJpegCrop(n, 500 + trial)
                                           : RandomProfile(n, 500 + trial);
    Resources r =
        Net(std::pow(10, 5 + 3 * u(rng)), 1 + std::floor(u(rng) * 4), 1 + std::floor(u(rng) * 2));
    if (trial % 2) AddRandomByteCosts(&r, u(rng), u(rng), u(rng));
    const std::vector<uint64_t> ids = AllSampleIds(p);
    double best = INFINITY;
    std::vector<Stage> stages(n);
    int plans = 1;
    for (int i = 0; i < n; ++i) plans *= kNumStages;
    for (int code = 0; code < plans; ++code) {
      bool allowed = true;
      for (int i = 0, c = code; i < n; ++i, c /= kNumStages) {
        stages[i] = StageAt(c % kNumStages);
        allowed &= p.stages.Has(stages[i]);
      }
      if (allowed) best = std::min(best, EvaluatePlan(p, r, ids, stages)->epoch_s);
    }
    const PlanResult opt = Plan(PlannerKind::kOptimal, p, r);
    EXPECT_LE(opt.lower_bound_s, best * (1 + 1e-12)) << "trial " << trial;
    EXPECT_LE(opt.cost.epoch_s, best + OneSampleSlack(p, r)) << "trial " << trial;
    if (opt.cost.epoch_s <= best * (1 + 1e-12)) ++exact;
  }
  // Polishing finds the true optimum of most tiny instances.
  EXPECT_GE(exact, kTrials * 3 / 4);
}

TEST(PlannerTest, PlansASubsetInRequestOrder) {
  const DatasetProfile p = RandomProfile(100, 5);
  Resources r = Net(2e6, 2, 2);
  r.batch_size = 10;
  r.gpu_seconds_per_batch = 1;
  const std::vector<uint64_t> ids = {42, 7, 99, 0, 13};
  absl::StatusOr<PlanResult> sub = MakePlan(PlannerKind::kOptimal, p, r, ids);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_EQ(sub->stages.size(), ids.size());
  EXPECT_DOUBLE_EQ(sub->cost.gpu_s, 1);  // 5 samples: one batch
  absl::StatusOr<PlanCost> again = EvaluatePlan(p, r, ids, sub->stages);
  EXPECT_DOUBLE_EQ(again->epoch_s, sub->cost.epoch_s);
  EXPECT_EQ(MakePlan(PlannerKind::kOptimal, p, r, {100}).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(PlannerTest, FortyThousandSamplesPlanQuickly) {
  const DatasetProfile p = RandomProfile(40000, 6);
  const Resources r = Net(62.5e6, 4, 2);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<PlanResult>> all = MakeAllPlans(p, r, AllSampleIds(p));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(all.ok());
  EXPECT_LT(seconds, 2.0);  // typically well under 0.2 s; generous for a busy machine
  const PlanResult& opt = all->back();
  EXPECT_LE(opt.cost.epoch_s - opt.lower_bound_s, 1e-3 * opt.lower_bound_s);
}

TEST(PlannerTest, KindNames) {
  for (PlannerKind kind : kAllPlannerKinds) {
    EXPECT_EQ(*ParsePlannerKind(PlannerKindName(kind)), kind);
  }
  EXPECT_EQ(*ParsePlannerKind("piloff"), PlannerKind::kResizeOff);
  EXPECT_EQ(ParsePlannerKind("smart").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModesTest, ParsesNamesAndOriginalAliases) {
  EXPECT_EQ(*ParseMode("nooff", PlannerKind::kOptimal), PlannerKind::kNoOff);
  EXPECT_EQ(*ParseMode("remote_nooff", PlannerKind::kOptimal), PlannerKind::kNoOff);
  EXPECT_EQ(*ParseMode("piloff", PlannerKind::kOptimal), PlannerKind::kResizeOff);
  EXPECT_EQ(*ParseMode("remote_piloff", PlannerKind::kOptimal), PlannerKind::kResizeOff);
  EXPECT_EQ(*ParseMode("remote_alloff", PlannerKind::kOptimal), PlannerKind::kAllOff);
  EXPECT_EQ(*ParseMode("smartoff", PlannerKind::kSophon), PlannerKind::kSophon);
  absl::Status bad = ParseMode("sometimes", PlannerKind::kOptimal).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("unknown mode 'sometimes'"), std::string::npos);
  EXPECT_EQ(FixedKindStage(PlannerKind::kResizeOff), Stage::kFlipped);
  EXPECT_TRUE(IsFixedKind(PlannerKind::kAllOff));
  EXPECT_FALSE(IsFixedKind(PlannerKind::kOptimal));
  EXPECT_STREQ(ModeName(PlannerKind::kOptimal), "smartoff");
  EXPECT_STREQ(ModeName(PlannerKind::kNoOff), "nooff");
}

}  // namespace
}  // namespace sophon
