#include "sophon/wire.h"

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
  return c;
}

absl::StatusOr<AugmentOptions> FromProto(const v1::AugmentConfig& config) {
  AugmentOptions o;
  o.crop_size = static_cast<int>(std::min<uint32_t>(config.crop_size(), 1u << 30));
  o.scale_min = config.scale_min();
  o.scale_max = config.scale_max();
  o.ratio_min = config.ratio_min();
  o.ratio_max = config.ratio_max();
  o.flip_probability = config.flip_probability();
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  return o;
}

void StageDataToProto(StageData data, v1::Sample* sample) {
  sample->set_stage(static_cast<v1::Stage>(data.stage));
  sample->clear_shape();
  switch (data.stage) {
    case Stage::kRaw:
      sample->set_dtype(v1::DTYPE_BYTES);
      sample->add_shape(static_cast<uint32_t>(data.data.size()));
      break;
    case Stage::kCropped:
    case Stage::kFlipped:
      sample->set_dtype(v1::DTYPE_UINT8);
      sample->add_shape(data.height);
      sample->add_shape(data.width);
      sample->add_shape(3);
      break;
    case Stage::kTensor:
      sample->set_dtype(v1::DTYPE_FLOAT32);
      sample->add_shape(3);
      sample->add_shape(data.height);
      sample->add_shape(data.width);
      break;
  }
  sample->set_payload(std::move(data.data));
}

absl::StatusOr<StageData> StageDataFromProto(v1::Sample* sample) {
  const int stage = sample->stage();
  if (stage < 0 || stage >= kNumStages) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample->id(), ": unknown stage ", stage));
  }
  StageData data;
  data.stage = static_cast<Stage>(stage);
  const auto& shape = sample->shape();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", sample->id(), " (",
                                                   StageName(data.stage), "): ", why));
  };
  switch (data.stage) {
    case Stage::kRaw:
      if (sample->dtype() != v1::DTYPE_BYTES) return bad("dtype is not bytes");
      break;
    case Stage::kCropped:
    case Stage::kFlipped:
      if (sample->dtype() != v1::DTYPE_UINT8) return bad("dtype is not uint8");
      if (shape.size() != 3 || shape[2] != 3) return bad("shape is not [H, W, 3]");
      data.height = static_cast<int>(shape[0]);
      data.width = static_cast<int>(shape[1]);
      if (sample->payload().size() != static_cast<size_t>(data.height) * data.width * 3) {
        return bad("payload size does not match its shape");
      }
      break;
    case Stage::kTensor:
      if (sample->dtype() != v1::DTYPE_FLOAT32) return bad("dtype is not float32");
      if (shape.size() != 3 || shape[0] != 3) return bad("shape is not [3, H, W]");
      data.height = static_cast<int>(shape[1]);
      data.width = static_cast<int>(shape[2]);
      if (sample->payload().size() !=
          static_cast<size_t>(data.height) * data.width * 3 * sizeof(float)) {
        return bad("payload size does not match its shape");
      }
      break;
  }
  data.data = std::move(*sample->mutable_payload());
  return data;
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
