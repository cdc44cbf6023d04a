#include "sophon/planning/planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sophon/planning/optimal_planner.h"
#include "sophon/planning/sophon_heuristic.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

absl::Status CheckInputs(const DatasetProfile& profile, const Resources& resources,
                         absl::Span<const uint64_t> ids) {
  RETURN_IF_ERROR(resources.Validate());
  if (absl::Status s = profile.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile of '", profile.dataset, "': ", s.message()));
  }
  return CheckSampleIds(profile, ids);
}

// Plans one kind; `optimal` is the optimal plan of the same inputs (its bound
// is shared by every kind, and it is the optimal kind's plan).
absl::StatusOr<PlanResult> PlanWith(PlannerKind kind, const DatasetProfile& profile,
                                    const Resources& resources, absl::Span<const uint64_t> ids,
                                    const OptimalPlan& optimal) {
  PlanResult result;
  result.kind = kind;
  switch (kind) {
    case PlannerKind::kNoOff:
    case PlannerKind::kResizeOff:
    case PlannerKind::kAllOff:
    case PlannerKind::kFeaturesOff:
    case PlannerKind::kPredictionsOff:
      // The fixed mode's stage, no later than the job's last stage.
      result.stages.assign(ids.size(), std::min(FixedKindStage(kind), profile.target));
      break;
    case PlannerKind::kSophon: result.stages = PlanSophon(profile, resources, ids); break;
    case PlannerKind::kOptimal: result.stages = optimal.stages; break;
  }
  ASSIGN_OR_RETURN(result.cost, EvaluatePlan(profile, resources, ids, result.stages));
  result.lower_bound_s = optimal.lower_bound_s;
  return result;
}

}  // namespace

const char* PlannerKindName(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kNoOff: return "nooff";
    case PlannerKind::kResizeOff: return "resizeoff";
    case PlannerKind::kAllOff: return "alloff";
    case PlannerKind::kFeaturesOff: return "featuresoff";
    case PlannerKind::kPredictionsOff: return "predictionsoff";
    case PlannerKind::kSophon: return "sophon";
    case PlannerKind::kOptimal: return "optimal";
  }
  return "unknown";
}

absl::StatusOr<PlannerKind> ParsePlannerKind(absl::string_view name) {
  if (name == "piloff") return PlannerKind::kResizeOff;
  for (PlannerKind kind : kAllPlannerKinds) {
    if (name == PlannerKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown planner '", name, "' (expected optimal, sophon, nooff, resizeoff or alloff)"));
}

bool IsFixedKind(PlannerKind kind) {
  return kind == PlannerKind::kNoOff || kind == PlannerKind::kResizeOff ||
         kind == PlannerKind::kAllOff || kind == PlannerKind::kFeaturesOff ||
         kind == PlannerKind::kPredictionsOff;
}

Stage FixedKindStage(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kNoOff: return Stage::kRaw;
    case PlannerKind::kResizeOff: return Stage::kFlipped;
    case PlannerKind::kFeaturesOff: return Stage::kFeatures;
    case PlannerKind::kPredictionsOff: return Stage::kPredictions;
    case PlannerKind::kAllOff:
    default: return Stage::kTensor;
  }
}

const char* ModeName(PlannerKind kind) {
  return IsFixedKind(kind) ? PlannerKindName(kind) : "smartoff";
}

absl::StatusOr<PlannerKind> ParseMode(absl::string_view name, PlannerKind smart) {
  if (name == "nooff" || name == "remote_nooff") return PlannerKind::kNoOff;
  if (name == "resizeoff" || name == "piloff" || name == "remote_piloff") {
    return PlannerKind::kResizeOff;
  }
  if (name == "alloff" || name == "remote_alloff") return PlannerKind::kAllOff;
  if (name == "featuresoff") return PlannerKind::kFeaturesOff;
  if (name == "predictionsoff") return PlannerKind::kPredictionsOff;
  if (name == "smartoff") return smart;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mode '", name,
      "' (expected nooff, resizeoff, alloff, featuresoff, predictionsoff, smartoff; aliases remote_nooff, piloff, "
      "remote_piloff, remote_alloff)"));
}

absl::StatusOr<PlanResult> MakePlan(PlannerKind kind, const DatasetProfile& profile,
                                    const Resources& resources, absl::Span<const uint64_t> ids) {
  RETURN_IF_ERROR(CheckInputs(profile, resources, ids));
  return PlanWith(kind, profile, resources, ids, PlanOptimal(profile, resources, ids));
}

absl::StatusOr<std::vector<PlanResult>> MakeAllPlans(const DatasetProfile& profile,
                                                     const Resources& resources,
                                                     absl::Span<const uint64_t> ids) {
  RETURN_IF_ERROR(CheckInputs(profile, resources, ids));
  const OptimalPlan optimal = PlanOptimal(profile, resources, ids);
  std::vector<PlanResult> results;
  for (PlannerKind kind : kAllPlannerKinds) {
    ASSIGN_OR_RETURN(PlanResult r, PlanWith(kind, profile, resources, ids, optimal));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace sophon
