// Planners: for every sample of an epoch, the stage at which the storage node
// stops. Pure functions of a profile and the resources (no gRPC, no torch).
//
//   nooff, resizeoff, alloff  the fixed modes: every sample RAW / FLIPPED / TENSOR
//   sophon                    the published SOPHON heuristic (sophon_heuristic.h)
//   optimal                   minimises the predicted epoch time (optimal_planner.h)
#ifndef SOPHON_PLANNING_PLANNER_H_
#define SOPHON_PLANNING_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sophon/planning/cost_model.h"
#include "sophon/planning/profile.h"
#include "sophon/ops/stage.h"

namespace sophon {

// How a plan is made: a fixed mode (every sample at one stage) or a cost-model
// planner (the kinds smartoff runs). This is what sophon-train's --mode and
// --planner select together.
// kFeaturesOff is the fixed mode of a job that ends at FEATURES (head
// fine-tuning): every sample through the storage node's backbone. Reports of
// ordinary jobs leave it out (it is alloff there), so it is not in
// kAllPlannerKinds. kPredictionsOff is the same for a job that ends at
// PREDICTIONS (offline inference): the whole model on the storage node.
enum class PlannerKind {
  kNoOff,
  kResizeOff,
  kAllOff,
  kSophon,
  kOptimal,
  kFeaturesOff,
  kPredictionsOff
};

// Every kind, in the order reports list them.
inline constexpr PlannerKind kAllPlannerKinds[] = {PlannerKind::kNoOff, PlannerKind::kResizeOff,
                                                   PlannerKind::kAllOff, PlannerKind::kSophon,
                                                   PlannerKind::kOptimal};

// "nooff", "resizeoff", "alloff", "sophon", "optimal", "featuresoff",
// "predictionsoff".
const char* PlannerKindName(PlannerKind kind);
// Accepts PlannerKindName() and piloff (= resizeoff); InvalidArgument otherwise.
absl::StatusOr<PlannerKind> ParsePlannerKind(absl::string_view name);

// True for the fixed modes; FixedKindStage is their stage (REQUIRES: fixed).
bool IsFixedKind(PlannerKind kind);
Stage FixedKindStage(PlannerKind kind);
// The mode's name: a fixed kind's own name, "smartoff" for the others.
const char* ModeName(PlannerKind kind);
// Parses a mode: nooff, resizeoff, alloff (and the original system's
// remote_nooff, piloff, remote_piloff, remote_alloff), or smartoff, which
// stands for `smart` (sophon or optimal). InvalidArgument otherwise.
absl::StatusOr<PlannerKind> ParseMode(absl::string_view name, PlannerKind smart);

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

#endif  // SOPHON_PLANNING_PLANNER_H_
