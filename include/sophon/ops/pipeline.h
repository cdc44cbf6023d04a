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
#include "sophon/ops/feature_extractor.h"
#include "sophon/ops/stage.h"

namespace sophon {

// A sample's payload at some stage.
struct StageData {
  Stage stage = kFirstStage;
  // The stage's layout (stage.h): opaque bytes, a JPEG region, uint8 HWC or
  // float32 CHW (native little-endian). std::string so it moves into
  // protobuf unchanged.
  std::string data;
  // The payload's size for HWC / CHW; the whole image's for a JPEG region;
  // 1 x F for a vector of F elements; 0 for an opaque stage.
  int height = 0;
  int width = 0;
  // A JPEG region's offset in the whole image; 0 otherwise.
  int region_top = 0;
  int region_left = 0;
};

struct PipelineOptions {
  AugmentOptions augment;
  DecodeLimits limits;
  // The frozen network of the FEATURES op; null = none (a sample asked for
  // FEATURES fails with FailedPrecondition). Not owned; thread-safe.
  const FeatureExtractor* backbone = nullptr;
  // Classes per sample at PREDICTIONS (the most probable first); at most the
  // head's classes are given. >= 1.
  int top_k = 5;
};

// The most elements a vector payload (FEATURES, PREDICTIONS) may have.
inline constexpr int kMaxVectorElements = 1 << 20;
// The most classes a PREDICTIONS payload may hold.
inline constexpr int kMaxTopK = kMaxVectorElements / 2;

// Elements of a payload of the vector stage `stage` made with `options`: the
// backbone's feature size for FEATURES, 2 min(top_k, classes) for
// PREDICTIONS; 0 without a backbone. -1 for a stage of another layout.
int VectorElements(Stage stage, const PipelineOptions& options);

// Checks that `data` is a well-formed payload of its stage for this crop size
// (a vector: 1 x F with 1 <= F <= kMaxVectorElements and F elements' bytes).
absl::Status CheckStageData(const StageData& data, int crop_size);

// Takes `in` to `target` by running the ops on NextOp's path (stage.h).
// InvalidArgument if target is before in.stage or the input is malformed (the
// message says what, not which sample: callers add it). `times`, if given,
// receives the thread CPU seconds of each op run; `stage_bytes`, if given, the
// payload size of every stage the sample is in, `in`'s included (what
// profiles need of stages whose size is not fixed by the crop size).
// When an op declines the sample (stage_ops.h) the result is at the stage
// before it, earlier than `target`, and `declined` (if given) gets why;
// without `declined` a refusal is an error.
absl::StatusOr<StageData> RunPipeline(StageData in, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, OpTimes* times = nullptr,
                                      PerStage<uint64_t>* stage_bytes = nullptr,
                                      absl::Status* declined = nullptr);

// For profiles: runs, on a copy of `in`, the ops that the path from in.stage
// to the last stage leaves out, those into and out of each stage it skips
// (RAW -> JPEG_CROP -> CROPPED beside RAW -> CROPPED), adding their times to
// `times` and the skipped stages' sizes to `stage_bytes`; their outputs are
// dropped. A stage an op declines for this sample costs what sending the
// sample as it is costs: in's size, and for the op out of it the time of the
// op that skips it (run here). Errors are those of the ops.
absl::Status MeasureSkippedOps(const StageData& in, const SampleKey& key,
                               const PipelineOptions& options, OpTimes* times,
                               PerStage<uint64_t>* stage_bytes);

// Finishes a sample at any stage into float32 CHW written to `dst`
// (3 * S * S floats), without an intermediate TENSOR buffer. A sample before
// FLIPPED is mirrored while it is converted, so its flip time stays 0 and the
// (nearly free) flip is part of the tensor time.
absl::Status FinishToTensor(StageData in, const SampleKey& key, const PipelineOptions& options,
                            float* dst, OpTimes* times = nullptr,
                            PerStage<uint64_t>* stage_bytes = nullptr);

}  // namespace sophon

#endif  // SOPHON_OPS_PIPELINE_H_
