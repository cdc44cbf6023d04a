// smartoff: plans every epoch per sample from a profile and the cost model,
// and re-plans the samples not yet requested when the measured bandwidth,
// storage-node speed or step time drift from the assumed ones.
#ifndef SOPHON_CLIENT_OFFLOAD_SMARTOFF_POLICY_H_
#define SOPHON_CLIENT_OFFLOAD_SMARTOFF_POLICY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/loader/loader.h"
#include "client/loader/offload_policy.h"
#include "client/loader/sample_client.h"
#include "client/offload/net_probe.h"
#include "client/offload/rate_estimate.h"
#include "sophon/ops/augment.h"
#include "sophon/planning/cluster_plan.h"
#include "sophon/planning/epoch_crops.h"
#include "client/loader/sample_cache.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"

namespace sophon {

struct SmartoffOptions {
  PlannerKind planner = PlannerKind::kOptimal;  // optimal | sophon (fixed kinds allowed too)
  std::string profile_folder;  // where the profile is looked up; "" = profiles/<dataset>/
  std::string profile_out;     // where a new profile is written; "" = profile_folder
  double net_bw_mbit = 0;      // network bandwidth; 0 = measure it
  double remote_cpus = 0;      // storage CPUs; 0 = min(server's prep workers, its CPU limit)
  double gpu_batch_seconds = -1;  // step time, fixed; < 0 = measure from the first batches
  // With gpu_batch_seconds < 0: the step time measured before training
  // (MeasureTrainingStep, client/train/step_measure.h) that the first plan
  // assumes; the first training steps are still measured and re-plan when
  // they drift from it. 0 = not measured (the first plan assumes no step
  // time; its epoch's prediction is made again once the first steps are
  // timed: the time elapsed then plus the re-planned remainder's). >= 0.
  double measured_gpu_batch_seconds = 0;
  double replan_threshold = 0.25; // relative drift that triggers a re-plan; > 0
  int64_t replan_min_samples = 256;  // observations between drift checks; >= 1
  // Plan each epoch with the training node's speed measured over the one
  // before (Resources.local_speed). Off in the policies of the servers of a
  // cluster: each sees only its share of the epoch.
  bool measure_local_speed = true;
  int speed_probe_samples = 64;      // samples used to measure the server's speed; >= 1
  // The stages a plan may choose (besides: only those the profile measured);
  // must hold RAW. Without JPEG_CROP, smartoff plans as it did before the
  // lossless crop existed (for comparisons).
  StageSet stages = StageSet::All();
  // Whether this node holds a sample's file (its sample cache): such a sample
  // is planned as costing no link and no storage node at RAW
  // (SampleProfile.held_here). Asked for every sample before each plan. Empty
  // = nothing is held.
  std::function<bool(uint64_t id)> held_here;
  // This node's CPU seconds per byte to take a held file out of its cache
  // (SampleProfile.held_read_seconds). Asked before each plan. Empty = 0.
  std::function<double()> held_seconds_per_byte;
  // The bytes this node's sample cache can still keep (a noevict cache that
  // is not full; 0 otherwise). While there is room, each plan fetches whole
  // (RAW) the first samples of its order that are not held, as many as fit,
  // so that later epochs find them here: a filling epoch moves more bytes
  // over the link, every later one fewer. Empty = no cache to fill.
  std::function<int64_t()> cache_room_bytes;
  // The job's last epoch (sophon-train --epochs - 1); -1 = not known. A
  // cache that does not outlive the job is not filled in it: what it would
  // keep could save nothing later, and filling costs the link now.
  int64_t last_epoch = -1;
  // The cache outlives the job (a disk tier): filling pays in a later job.
  bool cache_outlives_job = false;
  // The job's ranks on this node (sophon-train --local-world-size), who share
  // its link and cores: the first plan takes its part of them
  // (SharedFirstPlan, client/offload/rate_estimate.h; the storage node's
  // CPUs are divided by LoaderOptions.world). >= 1; 1 = this rank has the
  // node alone.
  int local_world_size = 1;
  // The storage server's counters now (CreateSmartoffPolicy: its GetStats),
  // asked at each epoch's start: what the server did for others over the
  // epoch before, and so the part of its CPUs the next plan takes
  // (AvailableShare). Empty, or an error: not measured (the first plan's
  // part is kept).
  std::function<absl::StatusOr<ServerLoad>()> server_load;
  // The job's crops: its seed and augmentation (LoaderOptions'). With them, and a profile
  // that knows its images' sizes, each epoch is planned at the crop boxes it draws
  // (EpochCropModel); without, at the average crop. CreateSmartoffPolicy sets them.
  struct JobCrops {
    uint64_t seed = 0;
    AugmentOptions augment;
  };
  std::optional<JobCrops> crops;

  // The one place these are checked; names the offending field.
  absl::Status Validate() const;
  // The step time the first plan assumes: gpu_batch_seconds when given,
  // else measured_gpu_batch_seconds.
  double FirstPlanStepSeconds() const {
    return gpu_batch_seconds >= 0 ? gpu_batch_seconds : measured_gpu_batch_seconds;
  }
};

// Plans with what `cache` holds (SmartoffOptions.held_here) and, for a
// noevict cache, fills it (cache_room_bytes). The cache must outlive the
// policy. Nothing when cache is null.
void PlanWithSampleCache(const SampleCache* cache, SmartoffOptions* options);

// Why smartoff re-planned.
enum class ReplanReason { kStepTime, kStorageSpeed, kNetwork };
const char* ReplanReasonName(ReplanReason reason);  // "step_time", "storage_speed", "network"

struct ReplanEvent {
  int64_t position = 0;               // first position of the epoch order re-planned
  std::vector<ReplanReason> reasons;  // in the order above
  std::string detail;                 // measured and assumed values, for the log
  int64_t stages_changed = 0;
};

// Thread-safe: OnSample runs on loader threads, Plan on the loader's sender,
// BeginEpoch/OnStep on the training thread.
class SmartoffPolicy final : public OffloadPolicy {
 public:
  using Clock = std::function<absl::Time()>;
  // `storage_wall_scale` turns a storage prep worker's wall time into the
  // CPU time the cost model charges (below 1 when a CPU quota is smaller
  // than the prep worker count; see CreateSmartoffPolicy). `clock` measures
  // the link rate (tests pass a fake one).
  SmartoffPolicy(DatasetProfile profile, Resources resources, const SmartoffOptions& options,
                 double storage_wall_scale = 1.0, Clock clock = &absl::Now);

  std::string name() const override { return "smartoff"; }
  absl::Status BeginEpoch(uint64_t epoch, absl::Span<const uint64_t> order) override;
  void Plan(int64_t first_position, absl::Span<const uint64_t> ids,
            absl::Span<SampleAssignment> out) override;
  // Accumulates the server's measured time and the bytes received.
  void OnSample(const SampleObservation& observation) override;
  // Records the step time, then re-plans if a measurement drifted.
  void OnStep(double step_seconds) override;
  void OnDataWait(double wait_seconds) override;
  double PredictedEpochSeconds() const override;

  Resources resources() const;
  // The prediction of the last plan (whole epoch or re-planned remainder).
  PlanResult last_plan() const;
  int replans() const;
  std::vector<ReplanEvent> replan_events() const;
  // Samples whose last read the servers answered from their sample cache.
  uint64_t cached_samples() const;

 private:
  void ResetWindowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At the start of an epoch: the training node's speed (Resources.local_speed)
  // from the epoch before, when it ran to its end on its first plan, as
  // LocalSpeedEstimate (client/offload/rate_estimate.h) judges it.
  // `others_s`: the storage node's seconds for others over the epoch (0 when
  // not measured); `whole_cpus`: its CPUs as a whole (0: resources_'s are).
  void UpdateLocalSpeedLocked(double others_s, double whole_cpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At the start of an epoch, with the server's counters now: the storage
  // node's seconds for others since the last epoch's start, and the part of
  // its CPUs they leave this rank (resources_.remote_cpus). Empty when not
  // measured (no counters, no earlier ones, or a server that does not report
  // them).
  struct OthersUse {
    double seconds = 0;
    double whole_cpus = 0;
  };
  std::optional<OthersUse> MeasureOthersLocked(const std::optional<ServerLoad>& load)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // profile_ with the samples the servers last served from their sample
  // cache marked `cached` (planned without a read), in *scratch; profile_
  // itself when there are none.
  // With a crop model, the crop-dependent sizes and times at the boxes `epoch` draws (always
  // in *scratch); *crop_part, when given, the mean part of the images they keep (0 without).
  const DatasetProfile& PlanningProfile(uint64_t epoch, DatasetProfile* scratch,
                                        double* crop_part = nullptr) const;
  // SmartoffOptions.cache_room_bytes: the first samples of `ids` that are not
  // held and fit the room go RAW in *plan, whose cost is evaluated again.
  void PlanCacheFill(const DatasetProfile& planning, const Resources& r,
                     absl::Span<const uint64_t> ids, PlanResult* plan) const;
  // If a measurement drifted beyond the threshold: updates the resources and
  // re-plans the positions not yet requested. true if it re-planned.
  bool MaybeReplan();

  // Constant after construction.
  // Fitted on the profile as measured (before profile_'s average crops); empty without
  // SmartoffOptions.crops or the images' sizes.
  const std::optional<EpochCropModel> crop_model_;
  const DatasetProfile profile_;
  const SmartoffOptions options_;
  const bool measure_gpu_;
  const double storage_wall_scale_;
  const Clock clock_;

  mutable absl::Mutex mu_;
  Resources resources_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> order_ ABSL_GUARDED_BY(mu_);
  std::vector<Stage> plan_ ABSL_GUARDED_BY(mu_);  // per position of order_
  int64_t planned_ ABSL_GUARDED_BY(mu_) = 0;      // positions handed to the loader
  PlanResult last_plan_ ABSL_GUARDED_BY(mu_);
  double epoch_prediction_s_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time epoch_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // BeginEpoch's
  int64_t epoch_steps_ ABSL_GUARDED_BY(mu_) = 0;  // OnStep calls since BeginEpoch
  bool fill_cache_ ABSL_GUARDED_BY(mu_) = true;   // this epoch fills the sample cache
  std::vector<ReplanEvent> replans_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // BeginEpoch's
  // BeginEpoch's planning profile when it planned the epoch's own crops; null otherwise.
  std::shared_ptr<const DatasetProfile> epoch_profile_ ABSL_GUARDED_BY(mu_);
  // Measurements since the last (re)plan.
  int64_t observed_ ABSL_GUARDED_BY(mu_) = 0;
  double server_actual_s_ ABSL_GUARDED_BY(mu_) = 0;     // server seconds of the ops
  double server_predicted_s_ ABSL_GUARDED_BY(mu_) = 0;  // client-speed seconds of that work
  // Per sample: the server's sample cache answered its last read.
  std::vector<uint8_t> cached_ ABSL_GUARDED_BY(mu_);
  uint64_t cached_count_ ABSL_GUARDED_BY(mu_) = 0;
  // The same sums over the whole epoch so far: the next epoch is planned with
  // the storage speed they give, drift threshold or not.
  double epoch_server_actual_s_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_server_predicted_s_ ABSL_GUARDED_BY(mu_) = 0;
  // What the training node's speed is judged by when the next epoch begins
  // (UpdateLocalSpeedLocked): the epoch's plan, whether it was re-planned, its
  // batches, the bytes received, the steps' time and when the last one ended.
  PlanCost epoch_plan_cost_ ABSL_GUARDED_BY(mu_);
  double epoch_remote_cpus_ ABSL_GUARDED_BY(mu_) = 0;  // the storage node's part it planned
  bool epoch_planned_ ABSL_GUARDED_BY(mu_) = false;
  bool epoch_replanned_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_wire_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_wait_s_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_step_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The training node's speed across epochs (what it remembers of them).
  LocalSpeedEstimate local_speed_ ABSL_GUARDED_BY(mu_);
  // The server's counters at the last epoch's start, when, and this rank's
  // samples' figures since (ServerLoad's sums, for MeasureOthersLocked).
  std::optional<ServerLoad> last_load_ ABSL_GUARDED_BY(mu_);
  absl::Time last_load_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double own_wall_s_ ABSL_GUARDED_BY(mu_) = 0;
  double own_cpu_s_ ABSL_GUARDED_BY(mu_) = 0;
  double own_read_s_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t window_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<double> step_seconds_ ABSL_GUARDED_BY(mu_);
};

// What smartoff measures of one storage server before planning: its link
// (the bandwidth probe, unless SmartoffOptions.net_bw_mbit is given), its CPUs
// (its prep workers or CPU limit, unless SmartoffOptions.remote_cpus), the
// per-byte costs of reading and sending there and of receiving here. The
// speed factor comes from the profile.
struct StorageMeasurement {
  // The server's CPUs as a whole; its link as a whole: the probe's rate with
  // the bytes the server sent others over it (WholeLinkRate).
  ServerResources server;
  double local_seconds_per_wire_byte = 0;
  double wall_scale = 1;  // StorageWallScale of its manifest
  // Its address is a loopback one: its prep workers run on this node's
  // cores, which the first plan of several ranks leaves them.
  bool on_this_node = false;
  NetProbeResult probe;
};
// What the first plan of a single server assumes: the measured server and
// link, the profile's storage speed, the loader's workers and batch, the step
// time of SmartoffOptions.FirstPlanStepSeconds(); with several ranks, their
// part of what they share (SharedFirstPlan over LoaderOptions.world,
// SmartoffOptions.local_world_size and this process's CPUs). Not validated.
Resources FirstPlanResources(const StorageMeasurement& measured, double remote_speed,
                             const LoaderOptions& loader_options, const SmartoffOptions& options);

absl::StatusOr<StorageMeasurement> MeasureStorageServer(SampleClient* client,
                                                        const LoaderOptions& loader_options,
                                                        const SmartoffOptions& options);

// The profile of a dataset (name, fingerprint, samples) from the profile
// folder (SmartoffOptions.profile_folder, else profiles/<name>/), or, when
// there is none or it is for another crop size, from `make_profile`, saved to
// SmartoffOptions.profile_out (else the folder).
absl::StatusOr<DatasetProfile> LoadOrMakeProfile(
    const std::string& dataset_name, uint64_t fingerprint, uint64_t num_samples,
    const LoaderOptions& loader_options, const SmartoffOptions& options,
    const std::function<absl::StatusOr<DatasetProfile>()>& make_profile);

// Wires smartoff up: loads the profile from the profile folder (refusing one
// of another file list), or profiles through the server and saves it there;
// measures the bandwidth unless given; takes the storage CPUs from the server
// unless given; and builds the policy.
absl::StatusOr<std::unique_ptr<SmartoffPolicy>> CreateSmartoffPolicy(
    SampleClient* client, const LoaderOptions& loader_options, const SmartoffOptions& options);

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_SMARTOFF_POLICY_H_
