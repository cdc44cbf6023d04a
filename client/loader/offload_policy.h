// The offload policy: for every sample, where it is processed. The loader asks
// it at send time (Plan) and tells it what it observed (OnSample); the train
// loop tells it the step times (OnStep). The interface lives with the loader,
// its caller; fixed modes and smartoff are its implementations, in
// client/offload/ (fixed_policy.h, smartoff_policy.h, cluster_policy.h).
#ifndef SOPHON_CLIENT_LOADER_OFFLOAD_POLICY_H_
#define SOPHON_CLIENT_LOADER_OFFLOAD_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sophon/ops/stage.h"

namespace sophon {

// The epoch number of the unreported warm-up batches before training
// (sophon-train --warmup-batches): far from any real epoch.
inline constexpr uint64_t kWarmupEpoch = uint64_t{1} << 32;

// "epoch N", or "warm-up" for kWarmupEpoch: how logs name an epoch.
inline std::string EpochName(uint64_t epoch) {
  return epoch == kWarmupEpoch ? std::string("warm-up") : "epoch " + std::to_string(epoch);
}

// What the loader saw of one sample.
struct SampleObservation {
  uint64_t id = 0;                 // global id
  int server = 0;                  // the server that sent it
  Stage received = kFirstStage;    // stage it arrived in
  uint64_t payload_bytes = 0;      // wire payload
  OpTimes local;                   // thread CPU seconds of the ops run here
  PerStage<uint64_t> local_bytes;  // payload size of each stage it passed here (0: not here)
  double server_cpu_seconds = 0;   // as reported by the server
  double server_wall_seconds = 0;  // the server's prep worker wall time
  double server_read_seconds = 0;  // ... of which reading the file
  bool cache_hit = false;          // the server read it from its sample cache
  bool ok = true;
  // The image's size, read from its header (LoaderOptions.measure_skipped_ops only, for a
  // sample received RAW); 0 when not read.
  uint32_t image_width = 0;
  uint32_t image_height = 0;
};

// Where one sample is processed.
struct SampleAssignment {
  // Any server holding the sample: the loader picks, among the live servers
  // of its shard, the one that owes it the fewest samples (a slow replica is
  // asked less).
  static constexpr int kAnyServer = -1;
  Stage stage = kFirstStage;  // the storage node stops here; the loader finishes the rest
  // An index into the loader's servers (ServerSet) that holds the sample, or
  // kAnyServer. A server that was given up on is replaced by a live replica.
  int server = kAnyServer;
};

class OffloadPolicy {
 public:
  virtual ~OffloadPolicy() = default;

  // The mode's name for logs and reports: "nooff", ..., "smartoff".
  virtual std::string name() const = 0;
  // An epoch starts: `order` is its request order (positions are indices into
  // it). Called by the loader before any Plan of the epoch.
  virtual absl::Status BeginEpoch(uint64_t epoch, absl::Span<const uint64_t> order) = 0;
  // Called on the loader's sender thread just before it requests positions
  // [first_position, first_position + ids.size()); ids are those positions'
  // sample ids. Fills `out` (same size). Positions come in increasing order,
  // each once per epoch.
  virtual void Plan(int64_t first_position, absl::Span<const uint64_t> ids,
                    absl::Span<SampleAssignment> out) = 0;
  // Called on the loader's prep threads once per sample. Thread-safe, quick.
  virtual void OnSample(const SampleObservation& observation) {}
  // Called on the training thread after every step with its duration.
  virtual void OnStep(double step_seconds) {}
  // Called on the training thread with the time it waited for each batch
  // (before that batch's step).
  virtual void OnDataWait(double wait_seconds) {}
  // The prediction made for the current epoch's wall time; 0 = none.
  virtual double PredictedEpochSeconds() const { return 0; }
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_OFFLOAD_POLICY_H_
