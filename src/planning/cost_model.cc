#include "sophon/planning/cost_model.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "sophon/base/status_macros.h"

namespace sophon {

const char* ResourceName(Resource resource) {
  switch (resource) {
    case Resource::kNetwork: return "network";
    case Resource::kRemoteCpu: return "remote_cpu";
    case Resource::kLocalCpu: return "local_cpu";
    case Resource::kGpu: return "gpu";
  }
  return "unknown";
}

StageCost SampleStageCost(const SampleProfile& sample, Stage stage, Stage target) {
  StageCost cost;
  cost.bytes = sample.bytes[stage];
  cost.raw_bytes = sample.cached ? 0 : sample.bytes[kFirstStage];
  if (sample.held_here && stage == kFirstStage) {
    // From this node's own cache: nothing is read, sent or received; taking
    // it out of the cache costs this node's CPU.
    cost.bytes = 0;
    cost.raw_bytes = 0;
    cost.local_ns += CpuNanos(sample.held_read_seconds);
  }
  // The ops on the way to `stage` run on the storage node, those from it on
  // here (a sample sent RAW is decoded straight from the file, without the
  // lossless crop: NextOp's path).
  for (Stage s = kFirstStage; s < target;) {
    const OpInfo& op = *NextOp(s, stage > s ? stage : target);
    const int64_t ns = CpuNanos(sample.client[op.op]);
    (op.to <= stage ? cost.remote_ns : cost.local_ns) += ns;
    s = op.to;
  }
  return cost;
}

double ResourceSeconds(double cpu_seconds, double cpus) {
  if (cpu_seconds <= 0) return 0;
  if (cpus <= 0) return std::numeric_limits<double>::infinity();
  return cpu_seconds / cpus;
}

PlanCost CostOfWork(const EpochWork& work, const Resources& resources) {
  PlanCost cost;
  cost.wire_bytes = work.wire_bytes;
  cost.remote_cpu_s =
      static_cast<double>(work.remote_ns) * 1e-9 * resources.remote_speed +
      static_cast<double>(work.raw_bytes) * resources.remote_seconds_per_raw_byte +
      static_cast<double>(work.wire_bytes) * resources.remote_seconds_per_wire_byte;
  cost.local_cpu_s = (static_cast<double>(work.local_ns) * 1e-9 +
                     static_cast<double>(work.wire_bytes) * resources.local_seconds_per_wire_byte) *
                    resources.local_speed;
  cost.net_s = static_cast<double>(work.wire_bytes) / resources.net_bytes_per_s;
  cost.remote_s = ResourceSeconds(cost.remote_cpu_s, resources.remote_cpus);
  cost.local_s = ResourceSeconds(cost.local_cpu_s, resources.local_cpus);
  const int64_t batches = (work.samples + resources.batch_size - 1) / resources.batch_size;
  cost.gpu_s = static_cast<double>(batches) * resources.gpu_seconds_per_batch;
  const std::pair<Resource, double> times[] = {{Resource::kNetwork, cost.net_s},
                                               {Resource::kRemoteCpu, cost.remote_s},
                                               {Resource::kLocalCpu, cost.local_s},
                                               {Resource::kGpu, cost.gpu_s}};
  cost.bottleneck = Resource::kNetwork;
  cost.epoch_s = cost.net_s;
  for (const auto& [resource, seconds] : times) {
    if (seconds > cost.epoch_s) {
      cost.epoch_s = seconds;
      cost.bottleneck = resource;
    }
  }
  return cost;
}

absl::StatusOr<PlanCost> EvaluatePlan(const DatasetProfile& profile, const Resources& resources,
                                      absl::Span<const uint64_t> ids,
                                      absl::Span<const Stage> stages) {
  RETURN_IF_ERROR(resources.Validate());
  if (ids.size() != stages.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan has ", stages.size(), " stages for ", ids.size(), " samples"));
  }
  RETURN_IF_ERROR(CheckSampleIds(profile, ids));
  EpochWork work;
  std::array<int64_t, kNumStages> per_stage{};
  for (size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<int>(stages[i]) < 0 || static_cast<int>(stages[i]) >= kNumStages) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", ids[i], ": invalid stage ", static_cast<int>(stages[i])));
    }
    work.Add(SampleStageCost(profile.samples[ids[i]], stages[i], profile.target));
    ++per_stage[static_cast<int>(stages[i])];
  }
  work.samples = static_cast<int64_t>(ids.size());
  PlanCost cost = CostOfWork(work, resources);
  cost.samples_per_stage = per_stage;
  return cost;
}

}  // namespace sophon
