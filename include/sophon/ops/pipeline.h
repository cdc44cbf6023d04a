// Runs the ops of one sample from any stage to any later stage, following the
// stage table (stage.h). The storage node and the training node both call
// this, so a sample is processed by the same code wherever its split point
// lies.
#ifndef SOPHON_OPS_PIPELINE_H_
#define SOPHON_OPS_PIPELINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/augment.h"
#include "sophon/ops/stage.h"

namespace sophon {

// A sample's payload at some stage.
struct StageData {
  Stage stage = kFirstStage;
  // The stage's layout (stage.h): opaque bytes, or uint8 HWC, or float32 CHW
  // (native little-endian). std::string so it moves into protobuf unchanged.
  std::string data;
  int height = 0;  // 0 for an opaque stage
  int width = 0;
};

struct PipelineOptions {
  AugmentOptions augment;
  DecodeLimits limits;
};

// Checks that `data` is a well-formed payload of its stage for this crop size.
absl::Status CheckStageData(const StageData& data, int crop_size);

// Takes `in` to `target` by running the table's ops in order. InvalidArgument
// if target is before in.stage or the input is malformed (the message says
// what, not which sample: callers add it). `times`, if given, receives the
// thread CPU seconds of each op run; `stage_bytes`, if given, the payload
// size of every stage the sample is in, `in`'s included (what profiles need
// of stages whose size is not fixed by the crop size).
absl::StatusOr<StageData> RunPipeline(StageData in, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, OpTimes* times = nullptr,
                                      PerStage<uint64_t>* stage_bytes = nullptr);

// Finishes a sample at any stage into float32 CHW written to `dst`
// (3 * S * S floats), without an intermediate TENSOR buffer. A sample before
// FLIPPED is mirrored while it is converted, so its flip time stays 0 and the
// (nearly free) flip is part of the tensor time.
absl::Status FinishToTensor(StageData in, const SampleKey& key, const PipelineOptions& options,
                            float* dst, OpTimes* times = nullptr,
                            PerStage<uint64_t>* stage_bytes = nullptr);

}  // namespace sophon

#endif  // SOPHON_OPS_PIPELINE_H_
