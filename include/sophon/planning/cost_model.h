// The cost model: how long an epoch takes under a plan (one stage per sample).
//
//   T_net    = wire bytes / network bytes per second
//   T_remote = (remote_speed * (client CPU seconds of the ops the storage node runs)
//               + raw bytes read * read cost + wire bytes * send cost) / remote_cpus
//   T_local  = local_speed * (client CPU seconds of the ops the training node runs
//               + wire bytes * receive cost) / local_cpus
//   T_gpu    = ceil(samples / batch_size) * gpu_seconds_per_batch
//   epoch    = max of the four (the pipeline overlaps them)
//
// A sample planned at stage k costs its stage-k payload on the wire, the ops
// up to k on the storage node and the ops after k on the training node (RAW:
// every op on the training node). One this node holds (SampleProfile.held_here)
// costs neither wire nor storage node at RAW.
#ifndef SOPHON_PLANNING_COST_MODEL_H_
#define SOPHON_PLANNING_COST_MODEL_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"
#include "sophon/ops/stage.h"

namespace sophon {

enum class Resource { kNetwork, kRemoteCpu, kLocalCpu, kGpu };
const char* ResourceName(Resource resource);  // "network", "remote_cpu", "local_cpu", "gpu"

// What one sample costs when planned at a stage. CPU in client nanoseconds
// (CpuNanos), before the storage node's speed factor.
struct StageCost {
  uint64_t bytes = 0;      // on the wire
  uint64_t raw_bytes = 0;  // read from storage (the same at every stage; 0 when cached)
  int64_t remote_ns = 0;
  int64_t local_ns = 0;
};
// The ops up to `stage` run on the storage node, those from it to `target`
// (the job's last stage, DatasetProfile.target) on the training node's CPU.
StageCost SampleStageCost(const SampleProfile& sample, Stage stage, Stage target = kLastStage);

// The work a plan puts on each resource; sums of StageCost, so exact.
struct EpochWork {
  uint64_t wire_bytes = 0;
  uint64_t raw_bytes = 0;  // read by the storage node
  int64_t remote_ns = 0;  // client CPU ns of the ops the storage node runs
  int64_t local_ns = 0;   // client CPU ns of the ops the training node runs
  int64_t samples = 0;

  // Adds or removes one sample's cost (not the sample count).
  void Add(const StageCost& c) {
    wire_bytes += c.bytes;
    raw_bytes += c.raw_bytes;
    remote_ns += c.remote_ns;
    local_ns += c.local_ns;
  }
  void Subtract(const StageCost& c) {
    wire_bytes -= c.bytes;
    raw_bytes -= c.raw_bytes;
    remote_ns -= c.remote_ns;
    local_ns -= c.local_ns;
  }
};

struct PlanCost {
  double net_s = 0;
  double remote_s = 0;  // infinite when work is planned on zero storage CPUs
  double local_s = 0;
  double gpu_s = 0;
  double epoch_s = 0;  // max of the four
  // The resource with the largest time (ties: the first of network, remote
  // CPU, local CPU, GPU).
  Resource bottleneck = Resource::kNetwork;
  uint64_t wire_bytes = 0;
  double remote_cpu_s = 0;  // storage node CPU seconds (ops with the speed factor, reads, sends)
  double local_cpu_s = 0;   // training node CPU seconds (ops + receiving the wire bytes)
  std::array<int64_t, kNumStages> samples_per_stage{};
};

// The model's times for `work`. REQUIRES: resources.Validate().ok().
PlanCost CostOfWork(const EpochWork& work, const Resources& resources);

// Seconds a resource with `cpus` workers needs for `cpu_seconds` of work: 0
// without work, infinite without workers.
double ResourceSeconds(double cpu_seconds, double cpus);

// Predicts an epoch over `ids` (positions in the profile) planned as
// `stages` (stages[i] for ids[i]). InvalidArgument if the sizes differ or the
// resources are invalid; OutOfRange for an id outside the profile.
absl::StatusOr<PlanCost> EvaluatePlan(const DatasetProfile& profile, const Resources& resources,
                                      absl::Span<const uint64_t> ids,
                                      absl::Span<const Stage> stages);

}  // namespace sophon

#endif  // SOPHON_PLANNING_COST_MODEL_H_
