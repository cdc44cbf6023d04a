// The published SOPHON offloading heuristic (spof_opt in the original
// main.py), made consistent:
//  1. For each sample take the stage with the smallest payload that is
//     strictly below its raw size (the earliest such stage on ties). Benefit:
//     the bytes it saves; cost: the storage node CPU seconds to reach it.
//  2. Rank samples by benefit / cost, highest first (zero cost ranks first;
//     ties keep id order).
//  3. Starting from all RAW, offload samples in that order while the network
//     time after offloading the sample is still at least the remote CPU time
//     after it. The first sample that would make the remote CPU time exceed
//     the network time is not offloaded and ends the walk. (The original adds
//     that sample's bytes and seconds to its totals and then leaves it RAW.)
// It balances network against storage CPU only: the local CPUs and the GPU
// are ignored, as in the original.
#ifndef SOPHON_PLANNING_SOPHON_HEURISTIC_H_
#define SOPHON_PLANNING_SOPHON_HEURISTIC_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"
#include "sophon/ops/stage.h"

namespace sophon {

// One stage per id. REQUIRES: profile and resources valid, ids in range.
std::vector<Stage> PlanSophon(const DatasetProfile& profile, const Resources& resources,
                              absl::Span<const uint64_t> ids);

}  // namespace sophon

#endif  // SOPHON_PLANNING_SOPHON_HEURISTIC_H_
