// smartoff over several storage servers: every server's samples are planned
// by a SmartoffPolicy of their own, on that server's resources and its share
// of the training node's (cluster_plan.h), so a server that drifts (a slower
// link, a busier CPU) re-plans its own samples only. In the replicated layout
// each epoch first picks every sample's server, in proportion to the
// replicas' capacity as last measured.
#ifndef SOPHON_CLIENT_OFFLOAD_CLUSTER_POLICY_H_
#define SOPHON_CLIENT_OFFLOAD_CLUSTER_POLICY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/loader/global_manifest.h"
#include "client/loader/offload_policy.h"
#include "client/loader/server_set.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/planning/cluster_plan.h"

namespace sophon {

class ClusterSmartoffPolicy final : public OffloadPolicy {
 public:
  // `profile` covers the global manifest; `manifest` must outlive the
  // policy. `wall_scales[s]` as SmartoffPolicy's storage_wall_scale.
  ClusterSmartoffPolicy(DatasetProfile profile, ClusterResources cluster,
                        const GlobalManifest* manifest, const SmartoffOptions& options,
                        std::vector<double> wall_scales);

  std::string name() const override { return "smartoff"; }
  absl::Status BeginEpoch(uint64_t epoch, absl::Span<const uint64_t> order) override;
  void Plan(int64_t first_position, absl::Span<const uint64_t> ids,
            absl::Span<SampleAssignment> out) override;
  void OnSample(const SampleObservation& observation) override;
  void OnStep(double step_seconds) override;
  double PredictedEpochSeconds() const override;

  // The joint plan of the current epoch as first made (each server's
  // samples, bytes, busy share, the bottleneck).
  ClusterPlanResult last_plan() const;
  // Server s's own policy (its resources, re-plans).
  const SmartoffPolicy& server_policy(int s) const { return *servers_[s]; }

 private:
  // Constant after construction.
  const DatasetProfile profile_;
  const GlobalManifest* const manifest_;
  const SmartoffOptions options_;
  std::vector<std::unique_ptr<SmartoffPolicy>> servers_;
  std::vector<double> shares_;  // of the samples, when the server policies were made

  mutable absl::Mutex mu_;
  ClusterResources cluster_ ABSL_GUARDED_BY(mu_);
  std::vector<int> server_of_ ABSL_GUARDED_BY(mu_);    // per position of the epoch
  std::vector<int64_t> index_of_ ABSL_GUARDED_BY(mu_); // position in its server's order
  ClusterPlanResult last_plan_ ABSL_GUARDED_BY(mu_);
};

// Wires smartoff up over `servers` (two or more): the profile of the global
// manifest (loaded, or made shard by shard through each shard's first
// server), every server measured (MeasureStorageServer), and the ingress:
// `ingress_mbit` > 0 as given, 0 for no limit, < 0 measured by probing every
// server at once (a limit only when their sum falls short of what each
// carried alone).
absl::StatusOr<std::unique_ptr<ClusterSmartoffPolicy>> CreateClusterSmartoffPolicy(
    ServerSet* servers, const LoaderOptions& loader_options, const SmartoffOptions& options,
    double ingress_mbit);

// Smartoff for a job's servers: CreateSmartoffPolicy for one server,
// CreateClusterSmartoffPolicy (with `ingress_mbit`) for several.
absl::StatusOr<std::unique_ptr<OffloadPolicy>> CreateSmartoffFor(
    ServerSet* servers, const LoaderOptions& loader_options, const SmartoffOptions& options,
    double ingress_mbit);

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_CLUSTER_POLICY_H_
