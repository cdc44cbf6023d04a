// Stages (split points) of the preprocessing pipeline.
#ifndef SOPHON_STAGE_H_
#define SOPHON_STAGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

// Same numbering as sophon.v1.Stage on the wire.
enum class Stage : int {
  kRaw = 0,      // encoded file bytes
  kCropped = 1,  // uint8 S x S x 3 (HWC) after decode + random resized crop
  kFlipped = 2,  // uint8 S x S x 3 (HWC) after the random horizontal flip
  kTensor = 3,   // float32 3 x S x S (CHW), normalized
};

inline constexpr int kNumStages = 4;

// "raw", "cropped", "flipped", "tensor".
const char* StageName(Stage stage);
// Parses a StageName() result; InvalidArgument otherwise.
absl::StatusOr<Stage> ParseStage(absl::string_view name);
// Payload bytes of a decoded stage for crop size s (RAW has no fixed size).
int64_t StagePayloadBytes(Stage stage, int crop_size);

}  // namespace sophon

#endif  // SOPHON_STAGE_H_
