// Planners: for every sample of an epoch, the stage at which the storage node
// stops. Pure functions of a profile and the resources (no gRPC, no torch).
//
//   nooff, resizeoff, alloff  the fixed modes: every sample RAW / FLIPPED / TENSOR
//   sophon                    the published SOPHON heuristic (sophon_heuristic.h)
//   optimal                   minimises the predicted epoch time (optimal_planner.h)
#ifndef SOPHON_PLANNER_H_
#define SOPHON_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sophon/cost_model.h"
#include "sophon/profile.h"
#include "sophon/stage.h"

namespace sophon {

enum class PlannerKind { kNoOff, kResizeOff, kAllOff, kSophon, kOptimal };

// Every kind, in the order reports list them.
inline constexpr PlannerKind kAllPlannerKinds[] = {PlannerKind::kNoOff, PlannerKind::kResizeOff,
                                                   PlannerKind::kAllOff, PlannerKind::kSophon,
                                                   PlannerKind::kOptimal};

// "nooff", "resizeoff", "alloff", "sophon", "optimal".
const char* PlannerKindName(PlannerKind kind);
// Accepts PlannerKindName() and piloff (= resizeoff); InvalidArgument otherwise.
absl::StatusOr<PlannerKind> ParsePlannerKind(absl::string_view name);

struct PlanResult {
  PlannerKind kind = PlannerKind::kOptimal;
  std::vector<Stage> stages;  // stages[i] is the stage of ids[i]
  PlanCost cost;              // the cost model's prediction for `stages`
  // No plan of these samples on these resources has a predicted epoch time
  // below this (optimal_planner.h says how it is computed).
  double lower_bound_s = 0;
};

// Plans an epoch over `ids` (positions in `profile`, in request order).
// InvalidArgument for an invalid profile or resources, OutOfRange for an id
// outside the profile.
absl::StatusOr<PlanResult> MakePlan(PlannerKind kind, const DatasetProfile& profile,
                                    const Resources& resources, absl::Span<const uint64_t> ids);

// MakePlan for every kind of kAllPlannerKinds, in that order.
absl::StatusOr<std::vector<PlanResult>> MakeAllPlans(const DatasetProfile& profile,
                                                     const Resources& resources,
                                                     absl::Span<const uint64_t> ids);

}  // namespace sophon

#endif  // SOPHON_PLANNER_H_
