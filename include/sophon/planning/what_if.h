// What-if planning: every planner kind over a dataset profile for given
// resources, on one storage server or several (sophon-plan; sophon.plan in
// Python). The resources are what an operator states or measured: nothing
// here runs a server.
#ifndef SOPHON_PLANNING_WHAT_IF_H_
#define SOPHON_PLANNING_WHAT_IF_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sophon/planning/cluster_plan.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/profile_loader.h"

namespace sophon {

struct WhatIfOptions {
  ProfileSource source;              // the profile (source.path is required)
  StageSet stages = StageSet::All(); // the stages plans may choose (with those profiled)
  double net_mbit = 500;             // the link, Mbit/s; > 0
  double remote_cpus = 4;            // storage node CPUs; >= 0
  double workers = 2;                // training node prep CPUs; > 0
  double remote_speed = 0;           // storage CPU speed factor; 0 = the profile's
  double recv_ns_per_byte = 0;       // training node CPU per byte received
  double read_ns_per_byte = 0;       // storage CPU per byte read
  double send_ns_per_byte = 0;       // storage CPU per byte sent
  double gpu_batch_seconds = 0;      // the training step; 0 = not a limit
  int batch_size = 256;
  // Several servers (> 1): each with the link and CPUs above unless
  // server_net_mbit / server_remote_cpus give one value per server; the
  // dataset sharded (contiguous ranges) or replicated on every server.
  int servers = 1;
  std::string layout = "sharded";
  std::vector<double> server_net_mbit;
  std::vector<double> server_remote_cpus;
  double ingress_mbit = 0;           // the training node's shared link; 0 = not a limit
  // As sophon-train plans: each sample's lossless crop (bytes and the times that depend on
  // it) at the dataset's average crop instead of the profiled epoch's (UseExpectedJpegCrops).
  bool expected_crops = false;
  // Every sample in the training node's cache: RAW crosses no link and costs this node
  // held_read_ns_per_byte of CPU per byte of the file; other stages are still storage jobs.
  bool held_here = false;
  double held_read_ns_per_byte = 0;  // >= 0

  // The one place these are checked (with Resources::Validate); names the field.
  absl::Status Validate() const;
};

struct WhatIf {
  DatasetProfile profile;
  Resources resources;                     // one server's (the first's with several)
  std::vector<PlanResult> plans;           // servers == 1: one per planner kind
  ClusterResources cluster;                // servers > 1
  std::string layout;
  std::vector<ClusterPlanResult> cluster_plans;  // servers > 1: one per planner kind
};

// Loads the profile and plans every kind. Errors name the field or the file.
absl::StatusOr<WhatIf> PlanWhatIf(const WhatIfOptions& options);

// The table, or the JSON object (plan_report.h), of whichever plans it holds.
std::string FormatWhatIf(const WhatIf& what_if, bool json);

}  // namespace sophon

#endif  // SOPHON_PLANNING_WHAT_IF_H_
