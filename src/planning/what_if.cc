#include "sophon/planning/what_if.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sophon/base/status_macros.h"
#include "sophon/planning/plan_report.h"

namespace sophon {

absl::Status WhatIfOptions::Validate() const {
  if (source.path.empty()) {
    return absl::InvalidArgumentError("WhatIfOptions.source.path (the profile) is required");
  }
  if (servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("WhatIfOptions.servers must be >= 1, got ", servers));
  }
  if (!(held_read_ns_per_byte >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WhatIfOptions.held_read_ns_per_byte must be >= 0, got ", held_read_ns_per_byte));
  }
  if (layout != "sharded" && layout != "replicated") {
    return absl::InvalidArgumentError(absl::StrCat(
        "WhatIfOptions.layout must be sharded or replicated, got '", layout, "'"));
  }
  for (const auto& [list, name] : {std::pair{&server_net_mbit, "server_net_mbit"},
                                   std::pair{&server_remote_cpus, "server_remote_cpus"}}) {
    if (!list->empty() && static_cast<int>(list->size()) != servers) {
      return absl::InvalidArgumentError(absl::StrCat("WhatIfOptions.", name, " has ",
                                                     list->size(), " values for ", servers,
                                                     " servers (WhatIfOptions.servers)"));
    }
  }
  if (!(ingress_mbit >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WhatIfOptions.ingress_mbit must be >= 0, got ", ingress_mbit));
  }
  return absl::OkStatus();
}

namespace {

SampleHolders HoldersOf(const std::string& layout, int servers, size_t samples) {
  SampleHolders holders;
  if (layout == "replicated") {
    holders.holders.emplace_back();
    for (int s = 0; s < servers; ++s) holders.holders[0].push_back(s);
    holders.group_of.assign(samples, 0);
    return holders;
  }
  for (int s = 0; s < servers; ++s) holders.holders.push_back({s});
  for (size_t i = 0; i < samples; ++i) {
    holders.group_of.push_back(static_cast<int>(i * servers / std::max<size_t>(1, samples)));
  }
  return holders;
}

}  // namespace

absl::StatusOr<WhatIf> PlanWhatIf(const WhatIfOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  WhatIf out;
  ASSIGN_OR_RETURN(out.profile, LoadProfile(options.source));
  out.profile.stages = out.profile.stages.Intersect(options.stages);
  RETURN_IF_ERROR(out.profile.Validate());
  if (options.expected_crops) UseExpectedJpegCrops(&out.profile);
  if (options.held_here) {
    for (SampleProfile& sample : out.profile.samples) {
      sample.held_here = true;
      sample.held_read_seconds =
          options.held_read_ns_per_byte * 1e-9 * static_cast<double>(sample.bytes[kFirstStage]);
    }
  }
  Resources& r = out.resources;
  r.net_bytes_per_s = MbitToBytesPerSecond(options.net_mbit);
  r.remote_cpus = options.remote_cpus;
  r.local_cpus = options.workers;
  r.remote_speed = options.remote_speed > 0 ? options.remote_speed : out.profile.server_speed_factor;
  r.local_seconds_per_wire_byte = options.recv_ns_per_byte * 1e-9;
  r.remote_seconds_per_raw_byte = options.read_ns_per_byte * 1e-9;
  r.remote_seconds_per_wire_byte = options.send_ns_per_byte * 1e-9;
  r.gpu_seconds_per_batch = options.gpu_batch_seconds;
  r.batch_size = options.batch_size;
  const std::vector<uint64_t> ids = AllSampleIds(out.profile);
  if (options.servers == 1) {
    ASSIGN_OR_RETURN(out.plans, MakeAllPlans(out.profile, r, ids));
    return out;
  }
  const int n = options.servers;
  out.cluster = ClusterResources::FromResources(r);
  out.cluster.servers.assign(n, out.cluster.servers[0]);
  for (int s = 0; s < n; ++s) {
    if (!options.server_net_mbit.empty()) {
      out.cluster.servers[s].net_bytes_per_s = MbitToBytesPerSecond(options.server_net_mbit[s]);
    }
    if (!options.server_remote_cpus.empty()) {
      out.cluster.servers[s].remote_cpus = options.server_remote_cpus[s];
    }
  }
  out.cluster.ingress_bytes_per_s = MbitToBytesPerSecond(options.ingress_mbit);
  out.layout = options.layout;
  const SampleHolders holders = HoldersOf(options.layout, n, ids.size());
  for (PlannerKind kind : kAllPlannerKinds) {
    ASSIGN_OR_RETURN(ClusterPlanResult plan,
                     MakeClusterPlan(kind, out.profile, out.cluster, ids, holders));
    out.cluster_plans.push_back(std::move(plan));
  }
  return out;
}

std::string FormatWhatIf(const WhatIf& w, bool json) {
  if (!w.cluster_plans.empty()) {
    return json ? FormatClusterPlanJson(w.profile, w.cluster, w.layout, w.cluster_plans)
                : FormatClusterPlanTable(w.profile, w.cluster, w.layout, w.cluster_plans);
  }
  return json ? FormatPlanJson(w.profile, w.resources, w.plans)
              : FormatPlanTable(w.profile, w.resources, w.plans);
}

}  // namespace sophon
