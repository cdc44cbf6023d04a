// The cost model and planning over several storage servers.
//
// Each server s has its own link (bytes/s) and CPUs (with its speed factor
// and per-byte read and send costs); the training node's ingress link, its
// CPUs and its GPU are shared by all of them:
//
//   epoch = max( max_s wire_s / link_s,  max_s T_remote,s,
//                sum_s wire_s / ingress,  T_local (all samples),  T_gpu )
//
// Planning decomposes: every server s gets a share f_s of the shared
// resources (its fraction of the samples), and its samples are planned by
// the single-server planner on Resources with link min(link_s, ingress * f_s),
// local CPUs L * f_s and a GPU time per batch g / f_s. A plan in which every
// server finishes within T under its share finishes within T in the joint
// model (the shared resources are used by sum), so the joint prediction is
// never above the largest share's. In the replicated layout a sample's
// server is chosen first: replicas of a shard get its samples in proportion
// to their capacity (the inverse of the epoch time each would need for the
// whole shard on its own resources).
//
// The lower bound pools the servers (their links up to the ingress, their
// CPUs at the fastest speed and lowest per-byte costs) into one and takes the
// single-server bound: no plan over these servers predicts a faster epoch.
#ifndef SOPHON_PLANNING_CLUSTER_PLAN_H_
#define SOPHON_PLANNING_CLUSTER_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sophon/planning/cost_model.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"

namespace sophon {

// One storage server as the cost model sees it (the Resources fields of the
// storage side).
struct ServerResources {
  double net_bytes_per_s = 0;  // its own link; > 0
  double remote_cpus = 4;
  double remote_speed = 1.0;
  double remote_seconds_per_raw_byte = 0;
  double remote_seconds_per_wire_byte = 0;
};

struct ClusterResources {
  std::vector<ServerResources> servers;  // >= 1
  // The training node's ingress link, shared by all servers; 0 = not a limit
  // (only the servers' own links are).
  double ingress_bytes_per_s = 0;
  // The training node's side, as in Resources.
  double local_cpus = 2;
  double local_seconds_per_wire_byte = 0;
  double gpu_seconds_per_batch = 0;
  int batch_size = 256;

  // The one check; errors name the field ("ClusterResources.servers[1].net_bytes_per_s ...").
  absl::Status Validate() const;
  // One server: the Resources the single-server model uses.
  static ClusterResources FromResources(const Resources& r);
};

// The Resources that server `server` plans its samples with, given its share
// (0 < share <= 1) of the shared resources (see above).
Resources ShareOf(const ClusterResources& cluster, int server, double share);

// Where each of an epoch's samples may be served from: the servers holding
// its shard (one in the sharded layout, several for replicas).
struct SampleHolders {
  // holders[k]: the servers of group k; group_of[i]: the group of sample i.
  std::vector<std::vector<int>> holders;
  std::vector<int> group_of;
};

struct ServerPlanCost {
  int64_t samples = 0;
  uint64_t wire_bytes = 0;
  double link_s = 0;       // wire bytes over its own link
  double remote_s = 0;     // its CPUs' time
  double remote_busy = 0;  // remote_s / epoch_s: its CPUs' busy share
};

struct ClusterPlanCost {
  std::vector<ServerPlanCost> servers;
  double ingress_s = 0;  // 0 without an ingress limit
  double local_s = 0;
  double gpu_s = 0;
  double epoch_s = 0;
  // "gpu", "local_cpu", "ingress", "server 2 link", "server 0 cpu".
  std::string bottleneck;
};

struct ClusterPlanResult {
  PlannerKind kind = PlannerKind::kOptimal;
  std::vector<Stage> stages;  // per sample of ids
  std::vector<int> servers;   // per sample of ids: the server that serves it
  ClusterPlanCost cost;
  double lower_bound_s = 0;
};

// The joint model's times for a plan (stages and servers per sample of ids).
// InvalidArgument if sizes differ or a server index is out of range.
absl::StatusOr<ClusterPlanCost> EvaluateClusterPlan(const DatasetProfile& profile,
                                                    const ClusterResources& cluster,
                                                    absl::Span<const uint64_t> ids,
                                                    absl::Span<const Stage> stages,
                                                    absl::Span<const int> servers);

// Chooses each sample's server among its holders (in proportion to the
// replicas' capacity, interleaved so every stretch of the order is spread),
// then plans each server's samples under its share and evaluates the whole.
absl::StatusOr<ClusterPlanResult> MakeClusterPlan(PlannerKind kind, const DatasetProfile& profile,
                                                  const ClusterResources& cluster,
                                                  absl::Span<const uint64_t> ids,
                                                  const SampleHolders& holders);

// Each replica's capacity among `servers` for a shard whose samples are
// `ids`: 1 / (the epoch time it would need for all of them alone); weights
// sum to 1.
std::vector<double> ReplicaWeights(PlannerKind kind, const DatasetProfile& profile,
                                   const ClusterResources& cluster,
                                   absl::Span<const uint64_t> ids, const std::vector<int>& servers);

// "epoch 12.3s (bottleneck server 1 link); server 0: 4000 samples 120 MB link 9.6s cpu 31% ..."
std::string DescribeClusterPlan(const ClusterPlanResult& plan);

}  // namespace sophon

#endif  // SOPHON_PLANNING_CLUSTER_PLAN_H_
