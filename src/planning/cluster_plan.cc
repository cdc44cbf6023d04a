#include "sophon/planning/cluster_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sophon/base/status_macros.h"

namespace sophon {

absl::Status ClusterResources::Validate() const {
  if (servers.empty()) return absl::InvalidArgumentError("ClusterResources.servers is empty");
  if (!std::isfinite(ingress_bytes_per_s) || ingress_bytes_per_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClusterResources.ingress_bytes_per_s must be >= 0 (0: no limit), got ",
        ingress_bytes_per_s));
  }
  for (size_t s = 0; s < servers.size(); ++s) {
    if (absl::Status st = ShareOf(*this, static_cast<int>(s), 1.0).Validate(); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("ClusterResources.servers[", s, "]: ", st.message()));
    }
  }
  return absl::OkStatus();
}

ClusterResources ClusterResources::FromResources(const Resources& r) {
  ClusterResources c;
  ServerResources s;
  s.net_bytes_per_s = r.net_bytes_per_s;
  s.remote_cpus = r.remote_cpus;
  s.remote_speed = r.remote_speed;
  s.remote_seconds_per_raw_byte = r.remote_seconds_per_raw_byte;
  s.remote_seconds_per_wire_byte = r.remote_seconds_per_wire_byte;
  c.servers.push_back(s);
  c.local_cpus = r.local_cpus;
  c.local_seconds_per_wire_byte = r.local_seconds_per_wire_byte;
  c.gpu_seconds_per_batch = r.gpu_seconds_per_batch;
  c.batch_size = r.batch_size;
  return c;
}

Resources ShareOf(const ClusterResources& cluster, int server, double share) {
  const ServerResources& s = cluster.servers[server];
  Resources r;
  r.net_bytes_per_s = cluster.ingress_bytes_per_s > 0
                          ? std::min(s.net_bytes_per_s, cluster.ingress_bytes_per_s * share)
                          : s.net_bytes_per_s;
  r.remote_cpus = s.remote_cpus;
  r.remote_speed = s.remote_speed;
  r.remote_seconds_per_raw_byte = s.remote_seconds_per_raw_byte;
  r.remote_seconds_per_wire_byte = s.remote_seconds_per_wire_byte;
  r.local_cpus = cluster.local_cpus * share;
  r.local_seconds_per_wire_byte = cluster.local_seconds_per_wire_byte;
  r.gpu_seconds_per_batch = share > 0 ? cluster.gpu_seconds_per_batch / share : 0;
  r.batch_size = cluster.batch_size;
  return r;
}

absl::StatusOr<ClusterPlanCost> EvaluateClusterPlan(const DatasetProfile& profile,
                                                    const ClusterResources& cluster,
                                                    absl::Span<const uint64_t> ids,
                                                    absl::Span<const Stage> stages,
                                                    absl::Span<const int> servers) {
  RETURN_IF_ERROR(cluster.Validate());
  if (ids.size() != stages.size() || ids.size() != servers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("plan has ", stages.size(), " stages and ",
                                                   servers.size(), " servers for ", ids.size(),
                                                   " samples"));
  }
  RETURN_IF_ERROR(CheckSampleIds(profile, ids));
  const int n = static_cast<int>(cluster.servers.size());
  std::vector<EpochWork> work(n);
  EpochWork all;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (servers[i] < 0 || servers[i] >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", ids[i], " is planned on server ", servers[i], " of ", n));
    }
    const StageCost c = SampleStageCost(profile.samples[ids[i]], stages[i], profile.target);
    work[servers[i]].Add(c);
    work[servers[i]].samples++;
    all.Add(c);
    all.samples++;
  }
  ClusterPlanCost cost;
  std::vector<std::pair<std::string, double>> times;
  for (int s = 0; s < n; ++s) {
    const PlanCost own = CostOfWork(work[s], ShareOf(cluster, s, 1.0));
    ServerPlanCost& sc = cost.servers.emplace_back();
    sc.samples = work[s].samples;
    sc.wire_bytes = work[s].wire_bytes;
    sc.link_s = static_cast<double>(work[s].wire_bytes) / cluster.servers[s].net_bytes_per_s;
    sc.remote_s = own.remote_s;
    times.emplace_back(absl::StrCat("server ", s, " link"), sc.link_s);
    times.emplace_back(absl::StrCat("server ", s, " cpu"), sc.remote_s);
  }
  cost.ingress_s = cluster.ingress_bytes_per_s > 0
                       ? static_cast<double>(all.wire_bytes) / cluster.ingress_bytes_per_s
                       : 0;
  const Resources shared = ShareOf(cluster, 0, 1.0);
  const PlanCost whole = CostOfWork(all, shared);
  cost.local_s = whole.local_s;
  cost.gpu_s = whole.gpu_s;
  times.emplace_back("ingress", cost.ingress_s);
  times.emplace_back("local_cpu", cost.local_s);
  times.emplace_back("gpu", cost.gpu_s);
  cost.epoch_s = -1;
  for (const auto& [name, seconds] : times) {
    if (seconds > cost.epoch_s) {
      cost.epoch_s = seconds;
      cost.bottleneck = name;
    }
  }
  for (ServerPlanCost& sc : cost.servers) {
    sc.remote_busy = cost.epoch_s > 0 ? sc.remote_s / cost.epoch_s : 0;
  }
  return cost;
}

std::vector<double> ReplicaWeights(PlannerKind kind, const DatasetProfile& profile,
                                   const ClusterResources& cluster,
                                   absl::Span<const uint64_t> ids,
                                   const std::vector<int>& servers) {
  std::vector<double> weights;
  double sum = 0;
  for (int s : servers) {
    // Alone, with the training node's side all its own: what this replica
    // itself can do.
    absl::StatusOr<PlanResult> alone = MakePlan(kind, profile, ShareOf(cluster, s, 1.0), ids);
    const double t = alone.ok() ? alone->cost.epoch_s : 0;
    const double w = t > 0 && std::isfinite(t) ? 1 / t : 0;
    weights.push_back(w);
    sum += w;
  }
  for (double& w : weights) w = sum > 0 ? w / sum : 1.0 / static_cast<double>(servers.size());
  return weights;
}

absl::StatusOr<ClusterPlanResult> MakeClusterPlan(PlannerKind kind, const DatasetProfile& profile,
                                                  const ClusterResources& cluster,
                                                  absl::Span<const uint64_t> ids,
                                                  const SampleHolders& holders) {
  RETURN_IF_ERROR(cluster.Validate());
  RETURN_IF_ERROR(CheckSampleIds(profile, ids));
  if (holders.group_of.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("holders name ", holders.group_of.size(),
                                                   " samples for ", ids.size()));
  }
  const int n = static_cast<int>(cluster.servers.size());
  ClusterPlanResult result;
  result.kind = kind;
  result.servers.assign(ids.size(), -1);
  // Each group's samples go to its servers by weight, interleaved: the
  // server with the largest deficit (weight x samples seen - samples given)
  // takes the next one.
  for (size_t k = 0; k < holders.holders.size(); ++k) {
    const std::vector<int>& group = holders.holders[k];
    if (group.empty()) return absl::InvalidArgumentError(absl::StrCat("group ", k, " has no server"));
    for (int s : group) {
      if (s < 0 || s >= n) {
        return absl::InvalidArgumentError(absl::StrCat("group ", k, " names server ", s));
      }
    }
    std::vector<uint64_t> members;
    std::vector<size_t> where;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (holders.group_of[i] == static_cast<int>(k)) {
        members.push_back(ids[i]);
        where.push_back(i);
      }
    }
    if (members.empty()) continue;
    const std::vector<double> weights =
        group.size() == 1 ? std::vector<double>{1.0}
                          : ReplicaWeights(kind, profile, cluster, members, group);
    std::vector<double> given(group.size(), 0);
    for (size_t j = 0; j < where.size(); ++j) {
      size_t best = 0;
      double best_deficit = -std::numeric_limits<double>::infinity();
      for (size_t g = 0; g < group.size(); ++g) {
        const double deficit = weights[g] * static_cast<double>(j + 1) - given[g];
        if (deficit > best_deficit) {
          best_deficit = deficit;
          best = g;
        }
      }
      given[best] += 1;
      result.servers[where[j]] = group[best];
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (result.servers[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sample ", ids[i], " has no holder group"));
    }
  }
  // Each server's samples under its share.
  result.stages.assign(ids.size(), kFirstStage);
  for (int s = 0; s < n; ++s) {
    std::vector<uint64_t> mine;
    std::vector<size_t> where;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (result.servers[i] == s) {
        mine.push_back(ids[i]);
        where.push_back(i);
      }
    }
    if (mine.empty()) continue;
    const double share = static_cast<double>(mine.size()) / static_cast<double>(ids.size());
    ASSIGN_OR_RETURN(PlanResult plan, MakePlan(kind, profile, ShareOf(cluster, s, share), mine));
    for (size_t j = 0; j < where.size(); ++j) result.stages[where[j]] = plan.stages[j];
  }
  ASSIGN_OR_RETURN(result.cost,
                   EvaluateClusterPlan(profile, cluster, ids, result.stages, result.servers));
  // The pooled single server: links up to the ingress, CPUs at the best
  // speed and per-byte costs.
  Resources pooled = ShareOf(cluster, 0, 1.0);
  pooled.net_bytes_per_s = 0;
  pooled.remote_cpus = 0;
  for (const ServerResources& s : cluster.servers) {
    pooled.net_bytes_per_s += s.net_bytes_per_s;
    pooled.remote_cpus += s.remote_cpus;
    pooled.remote_speed = std::min(pooled.remote_speed, s.remote_speed);
    pooled.remote_seconds_per_raw_byte =
        std::min(pooled.remote_seconds_per_raw_byte, s.remote_seconds_per_raw_byte);
    pooled.remote_seconds_per_wire_byte =
        std::min(pooled.remote_seconds_per_wire_byte, s.remote_seconds_per_wire_byte);
  }
  if (cluster.ingress_bytes_per_s > 0) {
    pooled.net_bytes_per_s = std::min(pooled.net_bytes_per_s, cluster.ingress_bytes_per_s);
  }
  ASSIGN_OR_RETURN(PlanResult bound, MakePlan(PlannerKind::kOptimal, profile, pooled, ids));
  result.lower_bound_s = std::min(bound.lower_bound_s, result.cost.epoch_s);
  return result;
}

std::string DescribeClusterPlan(const ClusterPlanResult& plan) {
  const ClusterPlanCost& c = plan.cost;
  std::string out = absl::StrFormat("epoch %.2fs (bottleneck %s; lower bound %.2fs)", c.epoch_s,
                                    c.bottleneck, plan.lower_bound_s);
  for (size_t s = 0; s < c.servers.size(); ++s) {
    const ServerPlanCost& sc = c.servers[s];
    absl::StrAppendFormat(&out, "; server %d: %d samples, %.1f MB, link %.2fs, cpu %.0f%% busy", s,
                          sc.samples, sc.wire_bytes / 1e6, sc.link_s, 100 * sc.remote_busy);
  }
  if (c.ingress_s > 0) absl::StrAppendFormat(&out, "; ingress %.2fs", c.ingress_s);
  absl::StrAppendFormat(&out, "; local cpu %.2fs, gpu %.2fs", c.local_s, c.gpu_s);
  return out;
}

}  // namespace sophon
