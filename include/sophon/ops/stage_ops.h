// The ops of the stage table (stage.h): each takes a sample from the stage
// before its row to its row's stage, in place. They see plain buffers only.
#ifndef SOPHON_OPS_STAGE_OPS_H_
#define SOPHON_OPS_STAGE_OPS_H_

#include "absl/status/status.h"

namespace sophon {

struct PipelineOptions;
struct SampleKey;
struct StageData;

// REQUIRES: data->stage is the stage before the op's row (the pipeline checks
// it). On success *data holds the op's output; the pipeline sets its stage.
// Errors say what is wrong, not which sample: callers add that.
using StageOp = absl::Status (*)(const SampleKey& key, const PipelineOptions& options,
                                 StageData* data);

// RAW -> CROPPED: decodes only what the random crop box needs, then resizes
// it to S x S (uint8 HWC).
absl::Status DecodeCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// CROPPED -> FLIPPED: the random horizontal flip.
absl::Status FlipOp(const SampleKey& key, const PipelineOptions& options, StageData* data);
// FLIPPED -> TENSOR: float32 CHW, normalized.
absl::Status ToTensorOp(const SampleKey& key, const PipelineOptions& options, StageData* data);

}  // namespace sophon

#endif  // SOPHON_OPS_STAGE_OPS_H_
