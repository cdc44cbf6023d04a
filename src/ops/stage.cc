#include "sophon/ops/stage.h"

#include "absl/strings/str_cat.h"

namespace sophon {

std::array<Stage, kNumStages> AllStages() {
  std::array<Stage, kNumStages> all{};
  for (int i = 0; i < kNumStages; ++i) all[i] = StageAt(i);
  return all;
}

absl::StatusOr<Stage> StageFromWire(int wire) {
  for (const StageInfo& info : kStageTable) {
    if (info.wire == wire) return info.stage;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown stage ", wire));
}

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kBytes:
    case DType::kUint8: return 1;
    case DType::kFloat32: return 4;
  }
  return 1;
}

int64_t StagePayloadBytes(Stage stage, int crop_size) {
  const StageInfo& info = GetStageInfo(stage);
  if (info.layout == Layout::kOpaque) return -1;
  return static_cast<int64_t>(crop_size) * crop_size * 3 * DTypeBytes(info.dtype);
}

std::vector<uint32_t> StageShape(Stage stage, int height, int width, uint64_t bytes) {
  const uint32_t h = static_cast<uint32_t>(height), w = static_cast<uint32_t>(width);
  switch (GetStageInfo(stage).layout) {
    case Layout::kOpaque: return {static_cast<uint32_t>(bytes)};
    case Layout::kHwc: return {h, w, 3};
    case Layout::kChw: return {3, h, w};
  }
  return {};
}

double OpTimes::Between(Stage from, Stage to) const {
  double seconds = 0;
  for (int k = StageIndex(from) + 1; k <= StageIndex(to); ++k) seconds += values[k];
  return seconds;
}

OpTimes& OpTimes::operator+=(const OpTimes& o) {
  for (int k = 0; k < kNumStages; ++k) values[k] += o.values[k];
  return *this;
}

}  // namespace sophon
