// How smartoff estimates, while a job trains, the rate of each resource an
// epoch runs on. One model, stated here; SmartoffPolicy only records the
// inputs and applies what these functions return.
//
// THE MODEL. An epoch planned with work W_r on resource r (bytes on the link,
// CPU seconds on the storage node, CPU seconds on the training node, steps
// on the training device) takes
//
//     T = max over r of (W_r / rate_r) + overheads
//
// (the pipeline overlaps the resources; the plan's PlanCost holds each
// W_r / rate_r at the assumed rates; the overheads are the pipeline's start
// and its last batch). From what an epoch shows, a rate is
//
//  * measured, when the resource reports its own work: the step (every step
//    is timed; the median after the first) and the storage node's speed (it
//    reports the seconds of each sample's ops; over the profile's seconds for
//    the same ops, StorageSpeed). Taken as measured once there is enough work
//    to tell (kMinWorkSeconds); within an epoch, only when it drifted by
//    SmartoffOptions.replan_threshold (a re-plan costs the planner's time).
//  * bounded, when the epoch shows the resource did its work in less time:
//    every resource's busy time is at most the time it ran. A link that
//    carried B bytes in t seconds has at least B / t of bandwidth; a training
//    node that finished in T seconds the work planned as L seconds runs at
//    least L / T times as fast as assumed. A bound beyond the estimate is
//    evidence on its own: the estimate moves to it.
//  * identified, only when the resource was the binding one: then its busy
//    time is the duration, and W_r / T is its rate. Which resource bound is
//    read from the others' utilisation, their busy share of the duration
//    (EpochShares): the link's (wire bytes / (T x bandwidth)), the storage
//    node's (its seconds / (T x its CPUs), StorageShare), the step's
//    (1 - the training loop's wait for data / T). A resource busy
//    kSaturatedShare of the duration or more may have bound it; one below did
//    not. The link is identified when the plan expected it to bind and the
//    storage node, which feeds it, was not saturated (LinkBandwidth). The
//    training node's speed is identified by elimination (UpdateLocalSpeed):
//    its CPU seconds per op are measured (thread CPU time) but not the share
//    of its cores that other processes take, which is what its speed is; so a
//    longer epoch than its planned share identifies it only when none of the
//    link, the storage node and the step was saturated.
//
// THE TRAINING NODE'S STEP. Its speed is inferred, not measured, so it moves
// by a bounded, stated step: toward the bound or identified value by at most
// a factor kMaxLocalSpeedStep per epoch, within [kMinLocalSpeed,
// kMaxLocalSpeed] (the range of slow-downs and speed-ups of the node it was
// profiled on the model accounts for), and not at all within
// kLocalSpeedDeadband of the estimate (an epoch's start and its last batch
// make that much noise). An epoch that ran on more than one plan, or not to
// its end, pairs no duration with one plan's work: it is no evidence (the
// policy does not pass it).
//
// ELIMINATION REFUTED. Identification by elimination assumes that every
// resource that can bind is observed. A rise identified in epoch k says
// T_k = speed x W_k (W: the work planned on the training node at speed 1).
// If the next epoch planned clearly less work there (W_k+1 < W_k by
// kRefutingWorkDrop or more) and still took as long (T_k+1 >= T_k, within the
// deadband), the duration
// did not follow the training node's work: it did not bind in epoch k, an
// unobserved bound did, and the rise had no identification: it is undone.
// That unobserved bound can bind again, so for the rest of the job no rise is
// identified by elimination (bounds, which need no identification, still
// lower the speed). This is judged before the saturation test: the work a
// rise moves off the training node can saturate the link or the storage
// node in the next epoch without saying anything of the rise.
//
// SHARED RESOURCES. A storage node's prep workers serve every client, and a
// training node's link and cores serve every rank on it; a rank plans with
// its own part of each. The first plan, before anything is measured, divides
// what is shared by those who share it (SharedFirstPlan): a server's CPUs by
// the job's ranks (each rank reads from every server), this node's link by
// its ranks, and its prep threads to their part of the node's cores. Each
// later epoch measures the storage node's part: the server's counters
// (ServerLoad: the summed figures of every sample it answered) less this
// rank's own samples' figures are what it did for the others, and what they
// leave is this rank's (AvailableShare), no less than an equal share among
// the server's open streams (its prep pool serves them in turn) and no more
// than the whole. An epoch then records the others' seconds
// (EpochRecord.storage_others_seconds), so that a server busy with others
// counts as saturated and the training node is not blamed for its wait.
#ifndef SOPHON_CLIENT_OFFLOAD_RATE_ESTIMATE_H_
#define SOPHON_CLIENT_OFFLOAD_RATE_ESTIMATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "sophon/planning/cost_model.h"
#include "sophon/planning/resources.h"

namespace sophon {

// A resource busy this share of a duration or more may have bound it.
inline constexpr double kSaturatedShare = 0.9;
// Work (seconds at the profile's speed) below which a measured or inferred
// speed is too noisy to act on.
inline constexpr double kMinWorkSeconds = 0.05;
// An epoch shorter than this says too little of the training node's speed.
inline constexpr double kMinLocalEpochSeconds = 1.0;
// The training node's speed: its range, its largest change per epoch (a
// factor), and the relative change under which it is not moved.
inline constexpr double kMinLocalSpeed = 0.5;
inline constexpr double kMaxLocalSpeed = 2.0;
inline constexpr double kMaxLocalSpeedStep = 2.0;
inline constexpr double kLocalSpeedDeadband = 0.02;
// The least drop of the work planned on the training node after a rise that
// can refute it: a smaller drop shortens a bound epoch by less than the
// noise of consecutive epochs of a second or two (a node of 2 cores with a
// storage server on one measured up to 10% between them), so an epoch as
// long says nothing of the rise.
inline constexpr double kRefutingWorkDrop = 0.15;

// What one epoch, run to its end on one plan, recorded.
struct EpochRecord {
  PlanCost plan;              // its plan, at the rates assumed when it was made
  double seconds = 0;         // from its start to the end of its last step
  uint64_t wire_bytes = 0;    // received
  double storage_seconds = 0; // the storage node's reported seconds of its ops (all its CPUs)
  double wait_seconds = 0;    // the training loop's wait for data
  // The storage node's seconds of others' samples over the epoch (its
  // counters less this rank's), and its CPUs as a whole; 0: the plan had the
  // storage node to itself (assumed.remote_cpus is the whole).
  double storage_others_seconds = 0;
  double storage_whole_cpus = 0;
};

// The busy share of the epoch's duration of each resource the training node's
// speed is told apart from. 0 for a resource with no rate to divide by.
struct EpochShares {
  double link = 0;
  double storage = 0;
  double step = 0;
};
EpochShares MeasureShares(const EpochRecord& epoch, const Resources& assumed);

// The storage node's busy share of `seconds`: the larger of its reported
// seconds over (`seconds` x `cpus`) and the plan's storage seconds over
// `seconds` (the plan also charges its reads and sends, which the server does
// not report per sample; pass 0 where no plan covers the duration, as over a
// re-planning window). The larger errs toward "saturated", which identifies
// nothing: the estimate does not move.
double StorageShare(double planned_seconds, double reported_seconds, double seconds,
                    double cpus);

// A storage server's counters at one moment, from its ServerStats, and its
// CPUs as this job's first plan measured them (min(prep workers, CPU limit),
// or SmartoffOptions.remote_cpus).
struct ServerLoad {
  double sample_wall_seconds = 0;  // summed over every sample it answered
  double sample_cpu_seconds = 0;
  double sample_read_seconds = 0;
  // Those it serves in turn, this rank included: its open Fetch streams, and
  // no fewer than the job's ranks (a rank between epochs may have none open).
  int competitors = 0;
  double whole_cpus = 0;
};

// The part of a resource of `whole` units left to this rank when the others
// use `others` of them: whole - others, no less than whole / `competitors`
// (an equal share among those that share it, this rank included; <= 1: the
// whole), no more than whole.
double AvailableShare(double whole, double others, int competitors);

// What is shared, divided before anything is measured. `world_size`: the
// job's ranks (every one reads from every storage server);
// `local_world_size`: its ranks on this node; `node_cpus`: the CPUs this
// process may use (ProcessCpuLimit; <= 0: not known). The storage node's
// CPUs over the ranks, this node's link over its ranks, and each rank's prep
// threads at most its part of the node's CPUs. With one rank, `resources` is
// left as it is.
void SharedFirstPlan(int world_size, int local_world_size, double node_cpus,
                     Resources* resources);

// The whole link's rate from a probe that may have run beside others (the
// ranks of this node probe at once): the probe's rate times (its bytes plus
// the server's other bytes over the probe) over its bytes, the others' bytes
// counted up to (local_world_size - 1) times the probe's own (no more ranks
// share this node's link; bytes to other nodes do not).
double WholeLinkRate(double probe_bytes_per_s, double probe_bytes, double others_bytes,
                     int local_world_size);

// The storage node's speed (Resources.remote_speed) measured over some work:
// its reported seconds over the profile's seconds for the same ops. Empty
// when the profile's seconds are under kMinWorkSeconds.
std::optional<double> StorageSpeed(double reported_seconds, double profiled_seconds);

// The link's bandwidth from a window's rate (bytes per second), or empty when
// the window tells nothing beyond `drift` (relative) of the assumed one. A
// rate above is a bound: the link carried it. A rate below identifies the
// bandwidth only when the link was binding: the plan expected it to bind and
// `storage_share` is under kSaturatedShare.
std::optional<double> LinkBandwidth(double bytes_per_s, double assumed_bytes_per_s,
                                    bool planned_binding, double storage_share, double drift);

// The training node's speed (Resources.local_speed) across a job's epochs.
// Holds only what the model needs from earlier epochs: the last rise's
// evidence, and whether elimination was refuted. No clock, no lock.
class LocalSpeedEstimate {
 public:
  enum class Evidence {
    kTooLittle,      // too short an epoch or too little work planned here
    kWithinDeadband, // the estimate explains the duration
    kBound,          // shorter than planned: faster, moved to the bound
    kIdentified,     // longer, and this node bound it: slower
    kNotIdentified,  // longer, but another resource may have bound it
    kRefuted,        // the last rise was not identified: undone
  };
  struct Update {
    double speed = 1;     // the new estimate (the assumed one when unchanged)
    Evidence evidence = Evidence::kTooLittle;
    EpochShares shares;
    std::string reason;   // for the log line: what the epoch showed and why
  };
  static const char* EvidenceName(Evidence evidence);

  // Judges one epoch against `assumed` (its plan's rates; local_speed is the
  // estimate) and remembers what later epochs need.
  Update Observe(const EpochRecord& epoch, const Resources& assumed);

  // An epoch refuted identification by elimination: no rise for the rest of
  // the job.
  bool elimination_refuted() const { return elimination_refuted_; }

 private:
  // The last rise: the duration and the work planned here (seconds at speed
  // 1) of the epoch that identified it, and the speed before it. 0: the last
  // epoch judged made no rise.
  double raised_after_s_ = 0;
  double raised_work_s_ = 0;
  double speed_before_rise_ = 1;
  bool elimination_refuted_ = false;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_RATE_ESTIMATE_H_
