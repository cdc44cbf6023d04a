// What-if planning's output (sophon-plan, sophon.plan in Python): the
// comparison table, its JSON form, and the sweep over bandwidths and storage
// CPU counts (CSV, plotted by tools/plot_sweep.py).
#ifndef SOPHON_PLANNING_PLAN_REPORT_H_
#define SOPHON_PLANNING_PLAN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/planning/cluster_plan.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/profile.h"

namespace sophon {

// A human-readable table: one row per plan, with the profile and resources
// it was made for.
std::string FormatPlanTable(const DatasetProfile& profile, const Resources& resources,
                            const std::vector<PlanResult>& plans);

// The same as one JSON object: {"profile": {...}, "resources": {...},
// "plans": [{"planner": ..., "epoch_s": ..., ...}]}. Infinite times are null.
std::string FormatPlanJson(const DatasetProfile& profile, const Resources& resources,
                           const std::vector<PlanResult>& plans);

// Several servers (cluster_plan.h): one row per planner kind with the joint
// prediction, its bottleneck and lower bound, then each server's samples,
// bytes, link time and CPU busy share.
std::string FormatClusterPlanTable(const DatasetProfile& profile, const ClusterResources& cluster,
                                   const std::string& layout,
                                   const std::vector<ClusterPlanResult>& plans);
std::string FormatClusterPlanJson(const DatasetProfile& profile, const ClusterResources& cluster,
                                  const std::string& layout,
                                  const std::vector<ClusterPlanResult>& plans);

struct SweepOptions {
  std::vector<double> net_mbit;     // bandwidths, Mbit/s; each > 0
  std::vector<double> remote_cpus;  // storage node CPU counts; each >= 0
};

// Plans every kind for every (bandwidth, storage CPUs) pair on top of `base`
// (its other resources unchanged) and returns the rows as CSV text with a
// header line: net_mbit,remote_cpus,planner,epoch_s,...,lower_bound_s.
absl::StatusOr<std::string> SweepCsv(const DatasetProfile& profile, const Resources& base,
                                     const SweepOptions& options);

}  // namespace sophon

#endif  // SOPHON_PLANNING_PLAN_REPORT_H_
