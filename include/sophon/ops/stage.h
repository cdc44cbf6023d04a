// The stage tables: every stage (split point) of the preprocessing pipeline
// as one row of kStageTable, in pipeline order (its name, wire value and
// payload layout), and every op as one row of kOpTable (the stages it goes
// from and to, its function and name). The pipeline (pipeline.h), the wire
// conversion (net/wire.h), the profiles and the planners read these tables;
// none of them names a stage.
//
// Adding a stage: a row here (and its Stage value), the ops into and out of
// it (stage_ops.h), the value in protos/sophon/v1/sophon.proto and the check
// of it in src/net/wire.cc. ARCHITECTURE.md walks through it.
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
  kRaw = 0,       // encoded file bytes
  kJpegCrop = 1,  // a JPEG of the iMCU-aligned region around the crop box (lossless)
  kCropped = 2,   // uint8 S x S x 3 (HWC) after decode + random resized crop
  kFlipped = 3,   // uint8 S x S x 3 (HWC) after the random horizontal flip
  kTensor = 4,    // float32 3 x S x S (CHW), normalized
  kFeatures = 5,  // fp16 [F]: a frozen backbone's features of the TENSOR (feature_extractor.h)
  kPredictions = 6,  // float32 [2k]: the head's top k (class, probability) pairs of the FEATURES
};
inline constexpr int kNumStages = 7;
inline constexpr Stage kFirstStage = Stage::kRaw;
inline constexpr Stage kLastStage = Stage::kPredictions;

// Element type of a payload; same numbering as sophon.v1.DType.
enum class DType : int { kBytes = 0, kUint8 = 1, kFloat32 = 2, kFloat16 = 3 };
// How a payload's elements are arranged. Sized layouts hold S x S x 3
// elements for crop size S.
enum class Layout : int {
  kOpaque,      // any number of bytes; shape [bytes]
  kJpegRegion,  // a JPEG of part of an image: shape [bytes]; StageData holds
                // the whole image's size and the part's offset in it
  kHwc,         // shape [S, S, 3]
  kChw,         // shape [3, S, S]
  kVector,      // shape [F]: F elements, F set by whoever made them (a
                // backbone's feature size, twice the classes asked for), not
                // by the crop size (VectorElements, pipeline.h)
};

// What an op's CPU time grows with, for the times model (planning/times_model.h).
enum class OpCost : int {
  kInputSized,  // the encoded input: bytes read, source pixels, a fixed part (decoding)
  kOutputSized, // the S x S output pixels (for FEATURES and PREDICTIONS: the
                // crop the backbone saw; a fixed cost at one crop size)
};

struct StageInfo {
  Stage stage;
  const char* name;  // "raw", ...: reports, profile columns, JSON keys
  // sophon.v1.Stage value. Not the pipeline index: convert with
  // StageToProto / StageFromWire (net/wire.h), never with a cast.
  int wire;
  DType dtype;
  Layout layout;
};

// clang-format off
inline constexpr StageInfo kStageTable[kNumStages] = {
    // stage           name         wire dtype            layout
    {Stage::kRaw,      "raw",       0,   DType::kBytes,   Layout::kOpaque},
    {Stage::kJpegCrop, "jpeg_crop", 4,   DType::kBytes,   Layout::kJpegRegion},
    {Stage::kCropped,  "cropped",   1,   DType::kUint8,   Layout::kHwc},
    {Stage::kFlipped,  "flipped",   2,   DType::kUint8,   Layout::kHwc},
    {Stage::kTensor,   "tensor",    3,   DType::kFloat32, Layout::kChw},
    {Stage::kFeatures, "features",  5,   DType::kFloat16, Layout::kVector},
    {Stage::kPredictions, "predictions", 6, DType::kFloat32, Layout::kVector},
};
// clang-format on

// The ops: each takes a sample from one stage to a later one. Usually to the
// next; an op that leads past a stage makes that stage one a sample may skip
// (RAW -> CROPPED beside RAW -> JPEG_CROP -> CROPPED: a sample that leaves the
// storage node as RAW is decoded straight from the file, not cropped first).
enum class Op : int {
  kJpegCrop = 0,        // RAW -> JPEG_CROP: the lossless crop (DCT domain)
  kDecodeJpegCrop = 1,  // JPEG_CROP -> CROPPED: decode the region, crop, resize
  kDecodeCrop = 2,      // RAW -> CROPPED: decode the file's crop, resize
  kFlip = 3,
  kTensor = 4,
  kFeatures = 5,        // TENSOR -> FEATURES: the frozen backbone's forward pass
  kPredict = 6,         // FEATURES -> PREDICTIONS: the head, softmax, top k
};
inline constexpr int kNumOps = 7;

struct OpInfo {
  Op op;
  Stage from;
  Stage to;
  StageOp fn;
  const char* name;  // profiles (<name>_s) and reports
  OpCost cost;
};

// clang-format off
inline constexpr OpInfo kOpTable[kNumOps] = {
    // op                  from              to                fn               name                cost
    {Op::kJpegCrop,       Stage::kRaw,      Stage::kJpegCrop, &JpegCropOp,     "jpeg_crop",        OpCost::kInputSized},
    {Op::kDecodeJpegCrop, Stage::kJpegCrop, Stage::kCropped,  &DecodeCropOp,   "decode_jpeg_crop", OpCost::kInputSized},
    {Op::kDecodeCrop,     Stage::kRaw,      Stage::kCropped,  &DecodeCropOp,   "decode_crop",      OpCost::kInputSized},
    {Op::kFlip,           Stage::kCropped,  Stage::kFlipped,  &FlipOp,         "flip",             OpCost::kOutputSized},
    {Op::kTensor,         Stage::kFlipped,  Stage::kTensor,   &ToTensorOp,     "tensor",           OpCost::kOutputSized},
    {Op::kFeatures,       Stage::kTensor,   Stage::kFeatures, &FeaturesOp,     "features",         OpCost::kOutputSized},
    {Op::kPredict,        Stage::kFeatures, Stage::kPredictions, &PredictOp,   "predict",          OpCost::kOutputSized},
};
// clang-format on

constexpr const StageInfo& GetStageInfo(Stage stage) {
  return kStageTable[static_cast<int>(stage)];
}
constexpr const OpInfo& GetOpInfo(Op op) { return kOpTable[static_cast<int>(op)]; }
constexpr int StageIndex(Stage stage) { return static_cast<int>(stage); }
constexpr Stage StageAt(int index) { return static_cast<Stage>(index); }

// The op a sample at `from` takes on its way to `target` (from < target): of
// the ops leaving `from`, the one that goes furthest without passing target.
// So a skippable stage is entered only by a sample that must end there.
constexpr const OpInfo* NextOp(Stage from, Stage target) {
  const OpInfo* best = nullptr;
  for (const OpInfo& op : kOpTable) {
    if (op.from == from && op.to <= target && (best == nullptr || op.to > best->to)) best = &op;
  }
  return best;
}

// A stage some op leads past.
constexpr bool IsSkippable(Stage stage) {
  for (const OpInfo& op : kOpTable) {
    if (op.from < stage && op.to > stage) return true;
  }
  return false;
}

constexpr bool StageTablesConsistent() {
  for (int i = 0; i < kNumStages; ++i) {
    if (static_cast<int>(kStageTable[i].stage) != i) return false;
    for (int j = 0; j < kNumStages; ++j) {  // wire values are distinct
      if (i != j && kStageTable[i].wire == kStageTable[j].wire) return false;
    }
  }
  for (int i = 0; i < kNumOps; ++i) {
    if (static_cast<int>(kOpTable[i].op) != i || kOpTable[i].from >= kOpTable[i].to) return false;
  }
  // From every stage, NextOp reaches every later stage, without passing it.
  for (int a = 0; a < kNumStages; ++a) {
    for (int b = a + 1; b < kNumStages; ++b) {
      Stage cur = StageAt(a);
      for (int steps = 0; cur != StageAt(b); ++steps) {
        const OpInfo* op = NextOp(cur, StageAt(b));
        if (op == nullptr || steps > kNumOps) return false;
        cur = op->to;
      }
    }
  }
  return true;
}
static_assert(StageTablesConsistent(),
              "kStageTable rows must follow Stage order with distinct wire values; kOpTable rows "
              "follow Op order, and the ops must lead from every stage to every later one");

// Every stage in pipeline order, for range-for loops.
std::array<Stage, kNumStages> AllStages();

inline const char* StageName(Stage stage) { return GetStageInfo(stage).name; }
inline const char* OpName(Op op) { return GetOpInfo(op).name; }
// The stage named `name` (StageInfo.name); InvalidArgument naming the stages if none.
absl::StatusOr<Stage> StageFromName(absl::string_view name);
// The stage of `wire` (a sophon.v1.Stage value); InvalidArgument if none.
absl::StatusOr<Stage> StageFromWire(int wire);
// Bytes of one element of `dtype`.
int DTypeBytes(DType dtype);
// Payload bytes of `stage` for crop size s; -1 for a stage whose size the
// crop size does not fix (RAW, JPEG_CROP, FEATURES, PREDICTIONS).
int64_t StagePayloadBytes(Stage stage, int crop_size);
// The wire shape of a payload of `stage`: [bytes] for a stage of any size,
// else the layout's dimensions for an image of height x width.
std::vector<uint32_t> StageShape(Stage stage, int height, int width, uint64_t bytes);

// A value per stage, indexed by Stage.
template <typename T>
struct PerStage {
  std::array<T, kNumStages> values{};
  T& operator[](Stage s) { return values[StageIndex(s)]; }
  const T& operator[](Stage s) const { return values[StageIndex(s)]; }
  bool operator==(const PerStage& o) const { return values == o.values; }
};

// A set of stages (the stages a planner may choose, ...).
class StageSet {
 public:
  static StageSet All() { return StageSet((1u << kNumStages) - 1); }
  static StageSet None() { return StageSet(0); }
  // The stages before FEATURES: those a sample reaches without a model.
  static StageSet BeforeFeatures() { return StageSet((1u << StageIndex(Stage::kFeatures)) - 1); }
  bool Has(Stage s) const { return (bits_ >> StageIndex(s)) & 1u; }
  StageSet& Add(Stage s) { bits_ |= 1u << StageIndex(s); return *this; }
  StageSet& Remove(Stage s) { bits_ &= ~(1u << StageIndex(s)); return *this; }
  StageSet Intersect(StageSet o) const { return StageSet(bits_ & o.bits_); }
  bool operator==(const StageSet& o) const { return bits_ == o.bits_; }
  bool operator!=(const StageSet& o) const { return bits_ != o.bits_; }

 private:
  explicit StageSet(uint32_t bits) : bits_(bits) {}
  uint32_t bits_;
};
// "raw,cropped,..." in pipeline order; "" for none.
std::string StageSetNames(StageSet set);
// Parses comma-separated stage names ("all" for every stage); InvalidArgument
// naming the unknown name and the known ones.
absl::StatusOr<StageSet> ParseStageSet(absl::string_view names);

// A value per op, indexed by Op.
template <typename T>
struct PerOp {
  std::array<T, kNumOps> values{};
  T& operator[](Op op) { return values[static_cast<int>(op)]; }
  const T& operator[](Op op) const { return values[static_cast<int>(op)]; }
  bool operator==(const PerOp& o) const { return values == o.values; }
};

// CPU seconds of each op, indexed by Op.
struct OpTimes : PerOp<double> {
  // Seconds of the ops a sample runs from `from` to `to` (NextOp's path);
  // 0 when `to` is not after `from`.
  double Between(Stage from, Stage to) const;
  double Total() const { return Between(kFirstStage, kLastStage); }
  OpTimes& operator+=(const OpTimes& o);
};

}  // namespace sophon

#endif  // SOPHON_OPS_STAGE_H_
