#include "sophon/ops/stage.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sophon {

std::array<Stage, kNumStages> AllStages() {
  std::array<Stage, kNumStages> all{};
  for (int i = 0; i < kNumStages; ++i) all[i] = StageAt(i);
  return all;
}

absl::StatusOr<Stage> StageFromName(absl::string_view name) {
  for (const StageInfo& info : kStageTable) {
    if (name == info.name) return info.stage;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown stage '", name, "' (known: ",
                                                 StageSetNames(StageSet::All()), ")"));
}

std::string StageSetNames(StageSet set) {
  std::string out;
  for (const StageInfo& info : kStageTable) {
    if (set.Has(info.stage)) absl::StrAppend(&out, out.empty() ? "" : ",", info.name);
  }
  return out;
}

absl::StatusOr<StageSet> ParseStageSet(absl::string_view names) {
  if (absl::StripAsciiWhitespace(names) == "all") return StageSet::All();
  StageSet set = StageSet::None();
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    absl::StatusOr<Stage> stage = StageFromName(absl::StripAsciiWhitespace(name));
    if (!stage.ok()) return stage.status();
    set.Add(*stage);
  }
  return set;
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
    case DType::kFloat16: return 2;
  }
  return 1;
}

int64_t StagePayloadBytes(Stage stage, int crop_size) {
  const StageInfo& info = GetStageInfo(stage);
  if (info.layout == Layout::kOpaque || info.layout == Layout::kJpegRegion ||
      info.layout == Layout::kVector) {
    return -1;
  }
  return static_cast<int64_t>(crop_size) * crop_size * 3 * DTypeBytes(info.dtype);
}

std::vector<uint32_t> StageShape(Stage stage, int height, int width, uint64_t bytes) {
  const uint32_t h = static_cast<uint32_t>(height), w = static_cast<uint32_t>(width);
  switch (GetStageInfo(stage).layout) {
    case Layout::kOpaque:
    case Layout::kJpegRegion: return {static_cast<uint32_t>(bytes)};
    case Layout::kHwc: return {h, w, 3};
    case Layout::kChw: return {3, h, w};
    case Layout::kVector: return {w};
  }
  return {};
}

double OpTimes::Between(Stage from, Stage to) const {
  double seconds = 0;
  while (from < to) {
    const OpInfo* op = NextOp(from, to);
    seconds += (*this)[op->op];
    from = op->to;
  }
  return seconds;
}

OpTimes& OpTimes::operator+=(const OpTimes& o) {
  for (int k = 0; k < kNumOps; ++k) values[k] += o.values[k];
  return *this;
}

}  // namespace sophon
