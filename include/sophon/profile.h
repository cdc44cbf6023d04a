// What planning needs to know: the per-sample profile (payload bytes at every
// stage, CPU seconds of every op) and the resources an epoch runs on.
// Reading and writing profiles: profile_csv.h (Sophon's format) and
// original_profile.h (the original SOPHON files).
#ifndef SOPHON_PROFILE_H_
#define SOPHON_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sophon/pipeline.h"
#include "sophon/stage.h"

namespace sophon {

// Measured facts about one sample.
struct SampleProfile {
  uint64_t id = 0;             // index in the manifest
  uint64_t raw_bytes = 0;      // RAW payload: the encoded file
  uint64_t cropped_bytes = 0;  // CROPPED payload
  uint64_t flipped_bytes = 0;  // FLIPPED payload
  uint64_t tensor_bytes = 0;   // TENSOR payload
  // Thread CPU seconds of each op transition, measured on the training node.
  OpTimes client;
  // Width * height of the encoded image; 0 when unknown. Only the times model
  // (times_model.h) uses it.
  uint64_t source_pixels = 0;
};

// How a profile's op times were obtained.
enum class TimesSource {
  kMeasured,  // thread CPU time of the real ops
  kModel,     // predicted from sizes by a TimesModel (times_model.h)
};
const char* TimesSourceName(TimesSource source);  // "measured", "model"

struct DatasetProfile {
  std::string dataset;       // dataset name (last path component of its root)
  uint64_t fingerprint = 0;  // Dataset::fingerprint() of the file list; 0 = unknown
  int crop_size = 224;       // S: the stage sizes hold for this crop size only
  // Server CPU seconds per client CPU second for the same op, as the server
  // measured it (storage and training nodes often have different CPUs). > 0.
  double server_speed_factor = 1.0;
  TimesSource times_source = TimesSource::kMeasured;
  // Where the times come from, in words, for reports (not stored in files).
  std::string times_detail;
  // samples[i].id == i: a profile covers the whole manifest, in order.
  std::vector<SampleProfile> samples;

  // The one place a profile is checked: ids dense and in order, sizes > 0,
  // times finite and >= 0, crop size and speed factor positive. Errors name
  // the sample.
  absl::Status Validate() const;
};

// Payload bytes of `sample` at `stage`.
uint64_t StageBytes(const SampleProfile& sample, Stage stage);

// Client CPU seconds of the ops that take a sample from `from` to `to`; 0 when
// `to` is not after `from`.
double OpSecondsBetween(const OpTimes& times, Stage from, Stage to);

// CPU time as whole nanoseconds. The cost model and the planners add up work
// in these units, so totals are exact and zero work is exactly zero.
int64_t CpuNanos(double seconds);

// 0, 1, ..., profile.samples.size() - 1: an epoch over the whole dataset.
std::vector<uint64_t> AllSampleIds(const DatasetProfile& profile);

// Checks that every id names a sample of `profile` (OutOfRange naming the
// first that does not).
absl::Status CheckSampleIds(const DatasetProfile& profile, absl::Span<const uint64_t> ids);

// The machines an epoch runs on.
struct Resources {
  double net_bytes_per_s = 0;  // network bandwidth to this trainer, bytes/s; > 0
  // Storage node prep workers (its --prep-workers). >= 0; with 0 the storage
  // node can only send RAW.
  double remote_cpus = 4;
  // Storage node CPU seconds per training node CPU second for the same op. > 0.
  double remote_speed = 1.0;
  double local_cpus = 2;  // training node prep workers (--workers); > 0
  // Training node CPU seconds per byte received (network stack, gRPC,
  // message parsing and copies), charged to the local CPUs beside the ops.
  // >= 0; 0 ignores it.
  double local_seconds_per_wire_byte = 0;
  // Storage node seconds per byte of file read (every sample is read, at any
  // stage) and per byte sent (gRPC, the network stack), charged to its CPUs
  // beside the ops: its threads that read and send share those CPUs with the
  // prep workers. >= 0; 0 ignores them.
  double remote_seconds_per_raw_byte = 0;
  double remote_seconds_per_wire_byte = 0;
  // Trainer step time per batch; >= 0, and 0 means the GPU never limits.
  double gpu_seconds_per_batch = 0;
  int batch_size = 256;  // samples per batch; > 0

  // The one place these values are checked. Names the offending field.
  absl::Status Validate() const;
};

// Bytes/s of a link of `mbit_per_s` megabits (10^6 bits) per second.
inline double MbitToBytesPerSecond(double mbit_per_s) { return mbit_per_s * 1e6 / 8; }

}  // namespace sophon

#endif  // SOPHON_PROFILE_H_
