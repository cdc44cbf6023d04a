#include "sophon/net/wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sophon {

v1::AugmentConfig ToProto(const AugmentOptions& options) {
  v1::AugmentConfig c;
  c.set_crop_size(static_cast<uint32_t>(options.crop_size));
  c.set_scale_min(options.scale_min);
  c.set_scale_max(options.scale_max);
  c.set_ratio_min(options.ratio_min);
  c.set_ratio_max(options.ratio_max);
  c.set_flip_probability(options.flip_probability);
  c.set_eval_resize(static_cast<uint32_t>(options.eval_resize));
  return c;
}

absl::StatusOr<AugmentOptions> FromProto(const v1::AugmentConfig& config) {
  // Beyond any valid size, and beyond an int: refused with the value sent,
  // before it is narrowed.
  constexpr uint32_t kMaxSide = 1u << 30;
  if (config.crop_size() > kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("crop size must be in [1, 4096], got ", config.crop_size()));
  }
  if (config.eval_resize() > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation resize must be 0 (random crops) or in [crop size, 16384], got ",
        config.eval_resize()));
  }
  AugmentOptions o;
  o.crop_size = static_cast<int>(config.crop_size());
  o.scale_min = config.scale_min();
  o.scale_max = config.scale_max();
  o.ratio_min = config.ratio_min();
  o.ratio_max = config.ratio_max();
  o.flip_probability = config.flip_probability();
  o.eval_resize = static_cast<int>(config.eval_resize());
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  return o;
}

// The stage table's wire values are the proto's (a stage added to one and not
// the other fails to compile here).
static_assert(v1::Stage_ARRAYSIZE == kNumStages, "sophon.v1.Stage and kStageTable differ");
static_assert(GetStageInfo(Stage::kRaw).wire == v1::STAGE_RAW);
static_assert(GetStageInfo(Stage::kCropped).wire == v1::STAGE_CROPPED);
static_assert(GetStageInfo(Stage::kFlipped).wire == v1::STAGE_FLIPPED);
static_assert(GetStageInfo(Stage::kTensor).wire == v1::STAGE_TENSOR);
static_assert(GetStageInfo(Stage::kJpegCrop).wire == v1::STAGE_JPEG_CROP);
static_assert(GetStageInfo(Stage::kFeatures).wire == v1::STAGE_FEATURES);
static_assert(GetStageInfo(Stage::kPredictions).wire == v1::STAGE_PREDICTIONS);
static_assert(static_cast<int>(DType::kBytes) == v1::DTYPE_BYTES);
static_assert(static_cast<int>(DType::kUint8) == v1::DTYPE_UINT8);
static_assert(static_cast<int>(DType::kFloat32) == v1::DTYPE_FLOAT32);
static_assert(static_cast<int>(DType::kFloat16) == v1::DTYPE_FLOAT16);

v1::Stage StageToProto(Stage stage) { return static_cast<v1::Stage>(GetStageInfo(stage).wire); }

absl::StatusOr<Stage> StageFromProto(int wire_stage) { return StageFromWire(wire_stage); }

uint64_t StatsSamplesAt(const v1::ServerStats& stats, Stage stage) {
  const int i = StageToProto(stage);
  return i < stats.samples_by_stage_size() ? stats.samples_by_stage(i) : 0;
}

uint64_t StatsBytesAt(const v1::ServerStats& stats, Stage stage) {
  const int i = StageToProto(stage);
  return i < stats.bytes_by_stage_size() ? stats.bytes_by_stage(i) : 0;
}

void StageDataToProto(StageData data, v1::Sample* sample) {
  const StageInfo& info = GetStageInfo(data.stage);
  sample->set_stage(StageToProto(data.stage));
  sample->set_dtype(static_cast<v1::DType>(info.dtype));
  sample->clear_shape();
  for (uint32_t d : StageShape(data.stage, data.height, data.width, data.data.size())) {
    sample->add_shape(d);
  }
  if (info.layout == Layout::kJpegRegion) {
    v1::JpegRegion* region = sample->mutable_region();
    region->set_image_height(static_cast<uint32_t>(data.height));
    region->set_image_width(static_cast<uint32_t>(data.width));
    region->set_top(static_cast<uint32_t>(data.region_top));
    region->set_left(static_cast<uint32_t>(data.region_left));
  } else {
    sample->clear_region();
  }
  sample->set_payload(std::move(data.data));
}

absl::StatusOr<StageData> StageDataFromProto(v1::Sample* sample) {
  absl::StatusOr<Stage> stage = StageFromWire(sample->stage());
  if (!stage.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample->id(), ": unknown stage ", sample->stage()));
  }
  const StageInfo& info = GetStageInfo(*stage);
  StageData data;
  data.stage = *stage;
  const auto& shape = sample->shape();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample->id(), " (", info.name, "): ", why));
  };
  if (sample->dtype() != static_cast<int>(info.dtype)) {
    return bad(absl::StrCat("dtype is ", sample->dtype(), ", expected ",
                            static_cast<int>(info.dtype)));
  }
  if (info.layout == Layout::kJpegRegion) {
    if (!sample->has_region()) return bad("no region");
    const v1::JpegRegion& r = sample->region();
    constexpr uint32_t kMaxSide = 1u << 16;  // a JPEG's sides are 16-bit
    if (r.image_height() == 0 || r.image_width() == 0 || r.image_height() > kMaxSide ||
        r.image_width() > kMaxSide || r.top() >= r.image_height() || r.left() >= r.image_width()) {
      return bad(absl::StrCat("region at (top ", r.top(), ", left ", r.left(), ") of a ",
                              r.image_height(), "x", r.image_width(), " image"));
    }
    data.height = static_cast<int>(r.image_height());
    data.width = static_cast<int>(r.image_width());
    data.region_top = static_cast<int>(r.top());
    data.region_left = static_cast<int>(r.left());
  } else if (info.layout == Layout::kVector) {
    if (shape.size() != 1) return bad("shape does not have 1 dimension");
    if (shape[0] < 1 || shape[0] > static_cast<uint32_t>(kMaxVectorElements)) {
      return bad(absl::StrCat("a vector of ", shape[0], " elements (at most ",
                              kMaxVectorElements, ")"));
    }
    data.height = 1;
    data.width = static_cast<int>(shape[0]);
    if (sample->payload().size() != static_cast<uint64_t>(data.width) * DTypeBytes(info.dtype)) {
      return bad("payload size does not match its shape");
    }
  } else if (info.layout != Layout::kOpaque) {
    if (shape.size() != 3) return bad("shape does not have 3 dimensions");
    const bool hwc = info.layout == Layout::kHwc;
    data.height = static_cast<int>(shape[hwc ? 0 : 1]);
    data.width = static_cast<int>(shape[hwc ? 1 : 2]);
    if (shape[hwc ? 2 : 0] != 3) return bad(hwc ? "shape is not [H, W, 3]" : "shape is not [3, H, W]");
    if (sample->payload().size() != static_cast<uint64_t>(data.height) * data.width * 3 *
                                        DTypeBytes(info.dtype)) {
      return bad("payload size does not match its shape");
    }
  }
  data.data = std::move(*sample->mutable_payload());
  return data;
}

FetchRequestBuilder::FetchRequestBuilder(uint64_t epoch, uint64_t seed,
                                         const PipelineOptions& pipeline, uint64_t key_offset)
    : epoch_(epoch),
      seed_(seed),
      key_offset_(key_offset),
      top_k_(pipeline.top_k),
      augment_(ToProto(pipeline.augment)) {
  Reset();
}

void FetchRequestBuilder::Reset() {
  request_.Clear();
  request_.set_epoch(epoch_);
  request_.set_seed(seed_);
  request_.set_key_offset(key_offset_);
  request_.set_top_k(static_cast<uint32_t>(std::max(0, top_k_)));
  *request_.mutable_augment() = augment_;
}

void FetchRequestBuilder::Add(uint64_t id, Stage target_stage) {
  v1::SampleRequest* sr = request_.add_samples();
  sr->set_id(id);
  sr->set_target_stage(StageToProto(target_stage));
}

v1::FetchRequest FetchRequestBuilder::Take() {
  v1::FetchRequest out = std::move(request_);
  Reset();
  return out;
}

absl::Status SampleStatus(const v1::Sample& sample) {
  if (sample.error_code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(sample.error_code()),
                      sample.error_message());
}

void SetSampleStatus(const absl::Status& status, v1::Sample* sample) {
  sample->set_error_code(static_cast<int32_t>(status.code()));
  sample->set_error_message(std::string(status.message()));
}

}  // namespace sophon
