#include "sophon/pipeline.h"

#include <sys/resource.h>
#include <time.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "sophon/image_ops.h"

namespace sophon {
namespace {

// RAW -> CROPPED: decode only what the crop box needs, then resize to S x S.
// The crop box depends on the image size, so it is chosen once the header is
// read, within the same decode.
absl::StatusOr<StageData> DecodeAndCrop(const StageData& in, const SampleKey& key,
                                        const PipelineOptions& options) {
  const int s = options.augment.crop_size;
  thread_local DecodedRegion region;  // reused: no allocation in steady state
  absl::Status status = DecodeJpegCrop(
      in.data, s, options.limits,
      [&](const ImageInfo& info) -> absl::StatusOr<CropBox> {
        return AugmentFor(key, info.height, info.width, options.augment).box;
      },
      &region);
  if (!status.ok()) return status;
  StageData out;
  out.stage = Stage::kCropped;
  out.height = s;
  out.width = s;
  out.data.resize(static_cast<size_t>(s) * s * 3);
  const Image8& image = region.image;
  ResizeAreaRgb(image.pixels.data(), image.height, image.width, image.width * image.channels,
                image.channels, region.x0, region.y0, region.x1, region.y1, s, s,
                reinterpret_cast<uint8_t*>(out.data.data()));
  return out;
}

// The flip bit needs only the key (the crop box is not involved).
bool FlipBit(const SampleKey& key, const PipelineOptions& options) {
  CounterRng flip_rng(key, /*stream=*/1);
  return flip_rng.Uniform(0.0, 1.0) < options.augment.flip_probability;
}

}  // namespace

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ProcessCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

absl::Status CheckStageData(const StageData& data, int crop_size) {
  if (data.stage == Stage::kRaw) return absl::OkStatus();
  if (data.height != crop_size || data.width != crop_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        StageName(data.stage), " payload is ", data.height, "x", data.width,
        ", expected the crop size ", crop_size, "x", crop_size));
  }
  const int64_t expected = StagePayloadBytes(data.stage, crop_size);
  if (static_cast<int64_t>(data.data.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(StageName(data.stage), " payload has ",
                                                   data.data.size(), " bytes, expected ",
                                                   expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<StageData> RunPipeline(StageData in, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, OpTimes* times) {
  if (target < in.stage) {
    return absl::InvalidArgumentError(absl::StrCat("cannot go back from stage ",
                                                   StageName(in.stage), " to ",
                                                   StageName(target)));
  }
  if (absl::Status s = CheckStageData(in, options.augment.crop_size); !s.ok()) return s;
  StageData cur = std::move(in);
  if (cur.stage == Stage::kRaw && target > Stage::kRaw) {
    const double t0 = ThreadCpuSeconds();
    absl::StatusOr<StageData> cropped = DecodeAndCrop(cur, key, options);
    if (times) times->decode_crop += ThreadCpuSeconds() - t0;
    if (!cropped.ok()) return cropped.status();
    cur = *std::move(cropped);
  }
  if (cur.stage == Stage::kCropped && target > Stage::kCropped) {
    const double t0 = ThreadCpuSeconds();
    if (FlipBit(key, options)) {
      FlipHorizontalRgb(reinterpret_cast<uint8_t*>(cur.data.data()), cur.height, cur.width);
    }
    cur.stage = Stage::kFlipped;
    if (times) times->flip += ThreadCpuSeconds() - t0;
  }
  if (cur.stage == Stage::kFlipped && target > Stage::kFlipped) {
    const double t0 = ThreadCpuSeconds();
    std::string tensor(StagePayloadBytes(Stage::kTensor, cur.height), '\0');
    ToTensorNormalize(reinterpret_cast<const uint8_t*>(cur.data.data()), cur.height, cur.width,
                      reinterpret_cast<float*>(tensor.data()));
    cur.data = std::move(tensor);
    cur.stage = Stage::kTensor;
    if (times) times->tensor += ThreadCpuSeconds() - t0;
  }
  return cur;
}

absl::Status FinishToTensor(StageData in, const SampleKey& key, const PipelineOptions& options,
                            float* dst, OpTimes* times) {
  if (in.stage == Stage::kTensor) {
    if (absl::Status s = CheckStageData(in, options.augment.crop_size); !s.ok()) return s;
    std::memcpy(dst, in.data.data(), in.data.size());
    return absl::OkStatus();
  }
  // A CROPPED sample is flipped while it is converted (one pass, same floats).
  const bool mirror = in.stage <= Stage::kCropped && FlipBit(key, options);
  const Stage target = in.stage <= Stage::kCropped ? Stage::kCropped : Stage::kFlipped;
  absl::StatusOr<StageData> ready = RunPipeline(std::move(in), target, key, options, times);
  if (!ready.ok()) return ready.status();
  const double t0 = ThreadCpuSeconds();
  ToTensorNormalize(reinterpret_cast<const uint8_t*>(ready->data.data()), ready->height,
                    ready->width, dst, mirror);
  if (times) times->tensor += ThreadCpuSeconds() - t0;
  return absl::OkStatus();
}

}  // namespace sophon
