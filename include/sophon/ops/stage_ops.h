// The ops of the stage table (stage.h): each takes a sample from the stage
// before its row to its row's stage, in place. They see plain buffers only.
#ifndef SOPHON_OPS_STAGE_OPS_H_
#define SOPHON_OPS_STAGE_OPS_H_

#include "absl/status/status.h"

namespace sophon {

struct PipelineOptions;
struct SampleKey;
struct StageData;

// REQUIRES: data->stage is the op's `from` stage (the pipeline checks it).
// On success *data holds the op's output; the pipeline sets its stage.
// Errors say what is wrong, not which sample: callers add that. An op into a
// stage a sample may skip may decline with Unimplemented (the sample cannot
// take that stage), leaving *data unchanged: the pipeline then hands the
// sample on at its `from` stage.
using StageOp = absl::Status (*)(const SampleKey& key, const PipelineOptions& options,
                                 StageData* data);

// RAW -> JPEG_CROP: a lossless crop of the JPEG around the sample's crop box
// (image/jpeg_crop.h). Declines a file that cannot be cropped so.
absl::Status JpegCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// RAW or JPEG_CROP -> CROPPED: decodes only what the random crop box needs,
// then resizes it to S x S (uint8 HWC). From JPEG_CROP, the box is the one
// of the whole image, moved into the region.
absl::Status DecodeCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// CROPPED -> FLIPPED: the random horizontal flip.
absl::Status FlipOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// FLIPPED -> TENSOR: float32 CHW, normalized.
absl::Status ToTensorOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// TENSOR -> FEATURES: options.backbone's features of the image, as fp16.
// FailedPrecondition without a backbone.
absl::Status FeaturesOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// FEATURES -> PREDICTIONS: options.backbone's head on the (fp16) features,
// softmax, and the options.top_k most probable classes (at most the head's
// classes) as float32 pairs (class, probability), most probable first (ties:
// the lower class first). FailedPrecondition without a backbone.
absl::Status PredictOp(const SampleKey& key, const PipelineOptions& options, StageData* data);

}  // namespace sophon

#endif  // SOPHON_OPS_STAGE_OPS_H_
