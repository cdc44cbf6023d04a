// The stage table: every stage (split point) of the preprocessing pipeline as
// one row, in pipeline order. A row names the stage, its wire value, how its
// payload is laid out, and the op that takes a sample from the previous stage
// to it. The pipeline (pipeline.h), the wire conversion (net/wire.h), the
// profiles and the planners read this table; none of them names a stage.
//
// Adding a stage: a row here (and its Stage value), its op in stage_ops.h,
// the value in protos/sophon/v1/sophon.proto and the check of it in
// src/net/wire.cc. ARCHITECTURE.md walks through it.
#ifndef SOPHON_OPS_STAGE_H_
#define SOPHON_OPS_STAGE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/ops/stage_ops.h"

namespace sophon {

// Pipeline order: a later stage is further along the op list.
enum class Stage : int {
  kRaw = 0,      // encoded file bytes
  kCropped = 1,  // uint8 S x S x 3 (HWC) after decode + random resized crop
  kFlipped = 2,  // uint8 S x S x 3 (HWC) after the random horizontal flip
  kTensor = 3,   // float32 3 x S x S (CHW), normalized
};
inline constexpr int kNumStages = 4;
inline constexpr Stage kFirstStage = Stage::kRaw;
inline constexpr Stage kLastStage = Stage::kTensor;

// Element type of a payload; same numbering as sophon.v1.DType.
enum class DType : int { kBytes = 0, kUint8 = 1, kFloat32 = 2 };
// How a payload's elements are arranged. Sized layouts hold S x S x 3
// elements for crop size S.
enum class Layout : int {
  kOpaque,  // any number of bytes; shape [bytes]
  kHwc,     // shape [S, S, 3]
  kChw,     // shape [3, S, S]
};

// What an op's CPU time grows with, for the times model (planning/times_model.h).
enum class OpCost : int {
  kNone,        // the first stage: no op
  kInputSized,  // the encoded input: bytes read, source pixels, a fixed part (decoding)
  kOutputSized, // the S x S output pixels
};

struct StageInfo {
  Stage stage;
  const char* name;  // "raw", ...: reports, profile columns, JSON keys
  int wire;          // sophon.v1.Stage value (checked at compile time in net/wire.cc)
  DType dtype;
  Layout layout;
  // The op that takes a sample from the previous stage to this one, and its
  // name in profiles and reports; nullptr / "" for the first stage.
  StageOp op;
  const char* op_name;
  OpCost op_cost;
};

// clang-format off
inline constexpr StageInfo kStageTable[kNumStages] = {
    // stage          name       wire dtype            layout           op             op name        op cost
    {Stage::kRaw,     "raw",     0,   DType::kBytes,   Layout::kOpaque, nullptr,       "",            OpCost::kNone},
    {Stage::kCropped, "cropped", 1,   DType::kUint8,   Layout::kHwc,    &DecodeCropOp, "decode_crop", OpCost::kInputSized},
    {Stage::kFlipped, "flipped", 2,   DType::kUint8,   Layout::kHwc,    &FlipOp,       "flip",        OpCost::kOutputSized},
    {Stage::kTensor,  "tensor",  3,   DType::kFloat32, Layout::kChw,    &ToTensorOp,   "tensor",      OpCost::kOutputSized},
};
// clang-format on

constexpr bool StageTableInOrder() {
  for (int i = 0; i < kNumStages; ++i) {
    if (static_cast<int>(kStageTable[i].stage) != i) return false;
    if ((i == 0) != (kStageTable[i].op == nullptr)) return false;
  }
  return true;
}
static_assert(StageTableInOrder(),
              "kStageTable rows must follow Stage order; only the first has no op");

constexpr const StageInfo& GetStageInfo(Stage stage) {
  return kStageTable[static_cast<int>(stage)];
}
constexpr int StageIndex(Stage stage) { return static_cast<int>(stage); }
constexpr Stage StageAt(int index) { return static_cast<Stage>(index); }
// Every stage in pipeline order, for range-for loops.
std::array<Stage, kNumStages> AllStages();

inline const char* StageName(Stage stage) { return GetStageInfo(stage).name; }
// The stage of `wire` (a sophon.v1.Stage value); InvalidArgument if none.
absl::StatusOr<Stage> StageFromWire(int wire);
// Bytes of one element of `dtype`.
int DTypeBytes(DType dtype);
// Payload bytes of `stage` for crop size s; -1 for an opaque stage (RAW).
int64_t StagePayloadBytes(Stage stage, int crop_size);
// The wire shape of a payload of `stage`: [bytes] for an opaque one, else the
// layout's dimensions for an image of height x width.
std::vector<uint32_t> StageShape(Stage stage, int height, int width, uint64_t bytes);

// A value per stage, indexed by Stage.
template <typename T>
struct PerStage {
  std::array<T, kNumStages> values{};
  T& operator[](Stage s) { return values[StageIndex(s)]; }
  const T& operator[](Stage s) const { return values[StageIndex(s)]; }
  bool operator==(const PerStage& o) const { return values == o.values; }
};

// CPU seconds of each op, indexed by the stage the op produces (the first
// stage's entry is always 0).
struct OpTimes : PerStage<double> {
  // Seconds of the ops that take a sample from `from` to `to`; 0 when `to`
  // is not after `from`.
  double Between(Stage from, Stage to) const;
  double Total() const { return Between(kFirstStage, kLastStage); }
  OpTimes& operator+=(const OpTimes& o);
};

}  // namespace sophon

#endif  // SOPHON_OPS_STAGE_H_
