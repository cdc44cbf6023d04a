#include "sophon/ops/pipeline.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sophon/base/cpu_time.h"
#include "sophon/image/image_ops.h"

namespace sophon {

int VectorElements(Stage stage, const PipelineOptions& options) {
  if (GetStageInfo(stage).layout != Layout::kVector) return -1;
  if (options.backbone == nullptr) return 0;
  if (stage == Stage::kFeatures) return options.backbone->feature_size();
  return 2 * std::max(0, std::min(options.top_k, options.backbone->num_classes()));
}

absl::Status CheckStageData(const StageData& data, int crop_size) {
  if (GetStageInfo(data.stage).layout == Layout::kJpegRegion) {
    if (data.height <= 0 || data.width <= 0 || data.region_top < 0 || data.region_left < 0 ||
        data.region_top >= data.height || data.region_left >= data.width) {
      return absl::InvalidArgumentError(absl::StrCat(
          StageName(data.stage), " payload claims a region at (top ", data.region_top, ", left ",
          data.region_left, ") of a ", data.height, "x", data.width, " image"));
    }
    return absl::OkStatus();
  }
  if (GetStageInfo(data.stage).layout == Layout::kVector) {
    const int64_t element = DTypeBytes(GetStageInfo(data.stage).dtype);
    if (data.height != 1 || data.width < 1 || data.width > kMaxVectorElements ||
        static_cast<int64_t>(data.data.size()) != data.width * element) {
      return absl::InvalidArgumentError(absl::StrCat(
          StageName(data.stage), " payload is ", data.height, "x", data.width, " with ",
          data.data.size(), " bytes, expected 1 x F (1 <= F <= ", kMaxVectorElements, ") with F x ",
          element, " bytes"));
    }
    return absl::OkStatus();
  }
  const int64_t expected = StagePayloadBytes(data.stage, crop_size);
  if (expected < 0) return absl::OkStatus();  // opaque: any size
  if (data.height != crop_size || data.width != crop_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        StageName(data.stage), " payload is ", data.height, "x", data.width,
        ", expected the crop size ", crop_size, "x", crop_size));
  }
  if (static_cast<int64_t>(data.data.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(StageName(data.stage), " payload has ",
                                                   data.data.size(), " bytes, expected ",
                                                   expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<StageData> RunPipeline(StageData in, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, OpTimes* times,
                                      PerStage<uint64_t>* stage_bytes, absl::Status* declined) {
  if (target < in.stage) {
    return absl::InvalidArgumentError(absl::StrCat("cannot go back from stage ",
                                                   StageName(in.stage), " to ",
                                                   StageName(target)));
  }
  if (absl::Status s = CheckStageData(in, options.augment.crop_size); !s.ok()) return s;
  StageData cur = std::move(in);
  if (stage_bytes) (*stage_bytes)[cur.stage] = cur.data.size();
  while (cur.stage < target) {
    const OpInfo& op = *NextOp(cur.stage, target);
    const double t0 = ThreadCpuSeconds();
    absl::Status status = op.fn(key, options, &cur);
    if (times) (*times)[op.op] += ThreadCpuSeconds() - t0;
    if (declined != nullptr && IsSkippable(op.to) &&
        status.code() == absl::StatusCode::kUnimplemented) {
      *declined = std::move(status);  // the op left cur as it was
      return cur;
    }
    if (!status.ok()) return status;
    cur.stage = op.to;
    if (stage_bytes) (*stage_bytes)[cur.stage] = cur.data.size();
  }
  return cur;
}

absl::Status MeasureSkippedOps(const StageData& in, const SampleKey& key,
                               const PipelineOptions& options, OpTimes* times,
                               PerStage<uint64_t>* stage_bytes) {
  for (Stage s = in.stage; s < kLastStage;) {
    const Stage next = NextOp(s, kLastStage)->to;
    for (int k = StageIndex(s) + 1; k < StageIndex(next); ++k) {  // the stages it skips
      const Stage skipped = StageAt(k);
      absl::Status declined;
      PerStage<uint64_t> sizes;
      absl::StatusOr<StageData> at =
          RunPipeline(in, skipped, key, options, times, &sizes, &declined);
      if (!at.ok()) return at.status();
      const OpInfo& out_op = *NextOp(skipped, kLastStage);
      if (at->stage != skipped) {
        // Declined: asked for `skipped`, the sample goes as it is, and what
        // follows is the op that skips it.
        if (stage_bytes) (*stage_bytes)[skipped] = in.data.size();
        OpTimes bypass;
        absl::StatusOr<StageData> out = RunPipeline(in, out_op.to, key, options, &bypass);
        if (!out.ok()) return out.status();
        if (times) (*times)[out_op.op] += bypass.Between(in.stage, out_op.to);
        continue;
      }
      if (stage_bytes) (*stage_bytes)[skipped] = sizes[skipped];
      absl::StatusOr<StageData> out =
          RunPipeline(*std::move(at), out_op.to, key, options, times);
      if (!out.ok()) return out.status();
    }
    s = next;
  }
  return absl::OkStatus();
}

absl::Status FinishToTensor(StageData in, const SampleKey& key, const PipelineOptions& options,
                            float* dst, OpTimes* times, PerStage<uint64_t>* stage_bytes) {
  if (in.stage == Stage::kTensor) {
    if (absl::Status s = CheckStageData(in, options.augment.crop_size); !s.ok()) return s;
    std::memcpy(dst, in.data.data(), in.data.size());
    if (stage_bytes) (*stage_bytes)[Stage::kTensor] = in.data.size();
    return absl::OkStatus();
  }
  // A sample before FLIPPED is flipped while it is converted (one pass, same
  // floats as FlipOp then ToTensorOp).
  const bool mirror = in.stage <= Stage::kCropped && FlipFor(key, options.augment);
  const Stage target = in.stage <= Stage::kCropped ? Stage::kCropped : Stage::kFlipped;
  absl::StatusOr<StageData> ready =
      RunPipeline(std::move(in), target, key, options, times, stage_bytes);
  if (!ready.ok()) return ready.status();
  const double t0 = ThreadCpuSeconds();
  ToTensorNormalize(reinterpret_cast<const uint8_t*>(ready->data.data()), ready->height,
                    ready->width, dst, mirror);
  if (times) (*times)[Op::kTensor] += ThreadCpuSeconds() - t0;
  if (stage_bytes) {
    // A fused flip passed through FLIPPED, which has the crop's size.
    if (target == Stage::kCropped) (*stage_bytes)[Stage::kFlipped] = ready->data.size();
    (*stage_bytes)[Stage::kTensor] = StagePayloadBytes(Stage::kTensor, ready->height);
  }
  return absl::OkStatus();
}

}  // namespace sophon
