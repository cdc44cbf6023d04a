// The optimal planner: minimises the cost model's epoch time
// max(T_net, T_remote, T_local, T_gpu) over every stage of every sample (the
// stages the profile offers).
//
// The path it walks: when a sample's CPU work splits between the two sides
// (remote + local = all its ops), T_remote and T_local depend on the plan
// only through X, the client CPU seconds offloaded; T_net depends on the wire
// bytes N; T_gpu not at all. For each X the fewest bytes any (fractional)
// plan can send is the lower convex hull F(X) of the Minkowski sum of the
// samples' (work, bytes) stage points, which is traced exactly by sorting
// every sample's own hull edges by slope (bytes per CPU second) and applying
// them in that order (the multiple-choice knapsack greedy). Walking that path
// and minimising max(F(X) / B, speed * X / R, (C - X) / L) gives the LP
// relaxation's optimum, including the fractional point inside an edge.
//
// A skippable stage breaks the split: a sample sent as JPEG_CROP costs the
// lossless crop there and a smaller decode here, a total that differs from
// RAW's. The walk therefore runs on relaxed costs, each stage's local work
// lowered to the sample's cheapest total minus the stage's remote work:
// every plan costs no more there than really, so the LP optimum of the
// relaxed costs (with T_gpu) is a valid lower bound, reported beside every
// plan (exact when no stage is skipped). The walk's best state by the real
// costs is compared with the fixed modes and the sophon heuristic, the best
// is kept, and single-sample moves polish it while they reduce the predicted
// time (these see the real costs of every stage). Ties are broken towards the
// plan whose resources are least loaded (leximax of the three times), which
// keeps headroom when the GPU is the bottleneck. CPU work is summed in whole
// nanoseconds (CpuNanos), so zero work is exact. O(n log n): 40,000 samples
// plan in tens of milliseconds.
#ifndef SOPHON_PLANNING_OPTIMAL_PLANNER_H_
#define SOPHON_PLANNING_OPTIMAL_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"
#include "sophon/ops/stage.h"

namespace sophon {

struct OptimalPlan {
  std::vector<Stage> stages;  // stages[i] is the stage of ids[i]
  // max(LP relaxation optimum, T_gpu): no plan predicts a faster epoch.
  // Never above the plan's own prediction.
  double lower_bound_s = 0;
};

// REQUIRES: profile.Validate() and resources.Validate() ok, ids in range.
OptimalPlan PlanOptimal(const DatasetProfile& profile, const Resources& resources,
                        absl::Span<const uint64_t> ids);

}  // namespace sophon

#endif  // SOPHON_PLANNING_OPTIMAL_PLANNER_H_
