#include "sophon/ops/pipeline.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "sophon/base/cpu_time.h"
#include "sophon/image/image_ops.h"

namespace sophon {

absl::Status CheckStageData(const StageData& data, int crop_size) {
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
                                      PerStage<uint64_t>* stage_bytes) {
  if (target < in.stage) {
    return absl::InvalidArgumentError(absl::StrCat("cannot go back from stage ",
                                                   StageName(in.stage), " to ",
                                                   StageName(target)));
  }
  if (absl::Status s = CheckStageData(in, options.augment.crop_size); !s.ok()) return s;
  StageData cur = std::move(in);
  if (stage_bytes) (*stage_bytes)[cur.stage] = cur.data.size();
  for (int k = StageIndex(cur.stage) + 1; k <= StageIndex(target); ++k) {
    const StageInfo& next = kStageTable[k];
    const double t0 = ThreadCpuSeconds();
    absl::Status status = next.op(key, options, &cur);
    if (times) (*times)[next.stage] += ThreadCpuSeconds() - t0;
    if (!status.ok()) return status;
    cur.stage = next.stage;
    if (stage_bytes) (*stage_bytes)[cur.stage] = cur.data.size();
  }
  return cur;
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
  if (times) (*times)[Stage::kTensor] += ThreadCpuSeconds() - t0;
  if (stage_bytes) {
    // A fused flip passed through FLIPPED, which has the crop's size.
    if (target == Stage::kCropped) (*stage_bytes)[Stage::kFlipped] = ready->data.size();
    (*stage_bytes)[Stage::kTensor] = StagePayloadBytes(Stage::kTensor, ready->height);
  }
  return absl::OkStatus();
}

}  // namespace sophon
