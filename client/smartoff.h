// smartoff on the training node: plans every epoch per sample from a profile
// and the cost model, profiles the dataset through the server when no profile
// exists, and re-plans the samples not yet requested when the measured
// bandwidth, storage-node speed or step time drift from the assumed ones.
#ifndef SOPHON_CLIENT_SMARTOFF_H_
#define SOPHON_CLIENT_SMARTOFF_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loader.h"
#include "modes.h"
#include "sample_client.h"
#include "sophon/planner.h"
#include "sophon/profile.h"

namespace sophon {

struct SmartoffOptions {
  PlannerKind planner = PlannerKind::kOptimal;  // optimal | sophon (fixed kinds allowed too)
  std::string profile_folder;  // where the profile is looked up; "" = profiles/<dataset>/
  std::string profile_out;     // where a new profile is written; "" = profile_folder
  double net_bw_mbit = 0;      // network bandwidth; 0 = measure (--net-bw=auto)
  double remote_cpus = 0;      // storage CPUs; 0 = min(server's --prep-workers, its CPU limit)
  double gpu_batch_seconds = -1;  // step time; < 0 = measure from the first batches
  double replan_threshold = 0.25; // relative drift that triggers a re-plan
  int64_t replan_min_samples = 256;  // observations between drift checks
  int speed_probe_samples = 64;      // samples used to measure the server's speed

  absl::Status Validate() const;
};

// A profiling pass through the server: every sample is fetched RAW and run
// through all ops here, timing each (no training); then the same work on
// `speed_probe_samples` samples is done by the server to get its speed factor
// (from its prep workers' wall time, so shared cores count; under a CPU quota
// below the prep worker count, from their CPU time, as the cost model charges
// the quota through the storage CPU count).
// Sizes of the decoded stages follow from the crop size.
absl::StatusOr<DatasetProfile> ProfileOverNetwork(SampleClient* client,
                                                  const LoaderOptions& loader_options,
                                                  int speed_probe_samples);

// The smartoff planner. Thread-safe: Observe runs on loader threads,
// PlanEpoch/ObserveStep/MaybeReplan on the training thread.
class SmartoffPlanner final : public Planner {
 public:
  // `storage_wall_scale` turns a storage prep worker's wall time into the
  // CPU time the cost model charges (below 1 when a CPU quota is smaller
  // than the prep worker count; see CreateSmartoffPlanner).
  SmartoffPlanner(DatasetProfile profile, Resources resources, const SmartoffOptions& options,
                  double storage_wall_scale = 1.0);

  std::vector<Stage> PlanEpoch(uint64_t epoch, const std::vector<uint64_t>& order) override;

  // Loader observer: accumulates the server's measured CPU time and bytes.
  void Observe(const SampleObservation& observation);
  // The trainer's measured step time of one batch.
  void ObserveStep(double seconds);
  // Between batches: if a measurement drifted beyond the threshold, updates
  // the resources and re-plans the positions of `loader` not yet requested.
  // Returns true if it re-planned.
  bool MaybeReplan(Loader* loader);

  Resources resources() const;
  // The prediction of the last plan (whole epoch or re-planned remainder).
  PlanResult last_plan() const;
  int replans() const;
  // The prediction made for the current epoch when it was planned.
  double epoch_prediction_seconds() const;

 private:
  void ResetWindowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DatasetProfile profile_;
  const SmartoffOptions options_;
  const bool measure_gpu_;
  const double storage_wall_scale_;

  mutable absl::Mutex mu_;
  Resources resources_ ABSL_GUARDED_BY(mu_);
  PlanResult last_plan_ ABSL_GUARDED_BY(mu_);
  double epoch_prediction_s_ ABSL_GUARDED_BY(mu_) = 0;
  int replans_ ABSL_GUARDED_BY(mu_) = 0;
  // Measurements since the last (re)plan.
  int64_t observed_ ABSL_GUARDED_BY(mu_) = 0;
  double server_actual_s_ ABSL_GUARDED_BY(mu_) = 0;     // server wall seconds per sample
  double server_predicted_s_ ABSL_GUARDED_BY(mu_) = 0;  // client-speed seconds of that work
  // The same sums over the whole epoch so far: the next epoch is planned with
  // the storage speed they give, drift threshold or not.
  double epoch_server_actual_s_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_server_predicted_s_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t window_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<double> step_seconds_ ABSL_GUARDED_BY(mu_);
};

// Wires smartoff up: loads the profile from the profile folder (refusing one
// of another file list), or profiles through the server and saves it there;
// measures the bandwidth unless given; takes the storage CPUs from the server
// unless given; and builds the planner.
absl::StatusOr<std::unique_ptr<SmartoffPlanner>> CreateSmartoffPlanner(
    SampleClient* client, const LoaderOptions& loader_options, const SmartoffOptions& options);

// --profile-out with any mode: profiles through the server and writes the
// profile folder.
absl::Status WriteProfileOverNetwork(SampleClient* client, const LoaderOptions& loader_options,
                                     const SmartoffOptions& options, const std::string& folder);

}  // namespace sophon

#endif  // SOPHON_CLIENT_SMARTOFF_H_
