// Runs the ops of one sample from any stage to any later stage. The storage
// node and the training node both call this, so a sample is processed by the
// same code wherever its split point lies.
#ifndef SOPHON_PIPELINE_H_
#define SOPHON_PIPELINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "sophon/augment.h"
#include "sophon/jpeg_codec.h"
#include "sophon/stage.h"

namespace sophon {

// A sample's payload at some stage.
struct StageData {
  Stage stage = Stage::kRaw;
  // RAW: file bytes. CROPPED/FLIPPED: uint8 HWC RGB. TENSOR: float32 CHW
  // (native little-endian). std::string so it moves into protobuf unchanged.
  std::string data;
  int height = 0;  // 0 for RAW
  int width = 0;
};

struct PipelineOptions {
  AugmentOptions augment;
  DecodeLimits limits;
};

// CPU seconds (thread time) spent in each op transition by one call.
struct OpTimes {
  double decode_crop = 0;  // RAW -> CROPPED
  double flip = 0;         // CROPPED -> FLIPPED
  double tensor = 0;       // FLIPPED -> TENSOR
};

// Checks that `data` is a well-formed payload of its stage for this crop size.
absl::Status CheckStageData(const StageData& data, int crop_size);

// Takes `in` to `target`. InvalidArgument if target is before in.stage or the
// input is malformed (the message says what, not which sample: callers add it).
// `times`, if given, receives the thread CPU seconds of each op run.
absl::StatusOr<StageData> RunPipeline(StageData in, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, OpTimes* times = nullptr);

// Finishes a sample at any stage into float32 CHW written to `dst`
// (3 * S * S floats), without an intermediate TENSOR buffer. A sample before
// FLIPPED is mirrored while it is converted, so `times->flip` stays 0 and the
// (nearly free) flip is part of `times->tensor`.
absl::Status FinishToTensor(StageData in, const SampleKey& key, const PipelineOptions& options,
                            float* dst, OpTimes* times = nullptr);

// Thread CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuSeconds();
// CPU seconds of this process, all threads, user + system.
double ProcessCpuSeconds();

}  // namespace sophon

#endif  // SOPHON_PIPELINE_H_
