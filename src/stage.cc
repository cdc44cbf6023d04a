#include "sophon/stage.h"

#include "absl/strings/str_cat.h"

namespace sophon {

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kRaw: return "raw";
    case Stage::kCropped: return "cropped";
    case Stage::kFlipped: return "flipped";
    case Stage::kTensor: return "tensor";
  }
  return "unknown";
}

absl::StatusOr<Stage> ParseStage(absl::string_view name) {
  for (int i = 0; i < kNumStages; ++i) {
    if (name == StageName(static_cast<Stage>(i))) return static_cast<Stage>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown stage '", name, "' (expected raw, cropped, flipped or tensor)"));
}

int64_t StagePayloadBytes(Stage stage, int crop_size) {
  const int64_t pixels = static_cast<int64_t>(crop_size) * crop_size;
  switch (stage) {
    case Stage::kRaw: return -1;
    case Stage::kCropped:
    case Stage::kFlipped: return pixels * 3;
    case Stage::kTensor: return pixels * 3 * static_cast<int64_t>(sizeof(float));
  }
  return -1;
}

}  // namespace sophon
