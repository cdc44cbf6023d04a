// Measures a Sophon profile of a dataset on this machine: runs every sample
// through the whole pipeline (RAW -> TENSOR) on the calling thread and
// records its stage sizes and the thread CPU seconds of each op. Used to
// calibrate the times model and to profile a dataset offline; the training
// loop profiles from its own observations instead.
#ifndef SOPHON_PROFILING_PROFILER_H_
#define SOPHON_PROFILING_PROFILER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/data/sample_source.h"
#include "sophon/ops/pipeline.h"
#include "sophon/planning/profile.h"

namespace sophon {

struct ProfilerOptions {
  PipelineOptions pipeline;  // crop size and augmentation of the profiled run
  // Passes over the data; each is a new epoch (new crops), and a sample's op
  // times are the mean over the passes. >= 1.
  int epochs = 1;
  uint64_t seed = 0;        // augmentation seed
  int64_t max_samples = 0;  // profile ids 0 .. max_samples - 1 only; 0 = all. >= 0

  // The one place these are checked; names the offending field.
  absl::Status Validate() const;
};

// The profile carries the source's name and fingerprint and
// TimesSource::kMeasured. A sample that cannot be read or decoded fails the
// call, with its id and path in the message.
absl::StatusOr<DatasetProfile> MeasureProfile(const SampleSource& source,
                                              const ProfilerOptions& options);

}  // namespace sophon

#endif  // SOPHON_PROFILING_PROFILER_H_
