#include "sophon/ops/stage_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "sophon/base/half.h"
#include "sophon/image/image_ops.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/image/jpeg_crop.h"
#include "sophon/ops/feature_extractor.h"
#include "sophon/ops/pipeline.h"

namespace sophon {

absl::Status JpegCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data) {
  absl::StatusOr<JpegRegion> region = CropJpegLossless(
      data->data, options.augment.crop_size, options.limits,
      [&](const ImageInfo& info) -> absl::StatusOr<CropBox> {
        return AugmentFor(key, info.height, info.width, options.augment).box;
      });
  if (!region.ok()) return region.status();
  if (region->jpeg.size() >= data->data.size()) {
    // Sequential coding of a progressive file, or a region that is most of
    // the image, can outweigh the file: then the file is what to send.
    return absl::UnimplementedError(absl::StrCat("the region's JPEG (", region->jpeg.size(),
                                                 " bytes) is not smaller than the file (",
                                                 data->data.size(), " bytes)"));
  }
  data->data = std::move(region->jpeg);
  data->height = region->image_height;
  data->width = region->image_width;
  data->region_top = region->top;
  data->region_left = region->left;
  return absl::OkStatus();
}

absl::Status DecodeCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data) {
  const int s = options.augment.crop_size;
  // The crop box depends on the image size, so it is chosen once the header
  // is read, within the same decode. A JPEG_CROP region carries the whole
  // image's size: its box is that image's, moved by the region's offset.
  const bool region_input = data->stage == Stage::kJpegCrop;
  thread_local DecodedRegion region;  // reused: no allocation in steady state
  absl::Status status = DecodeJpegCrop(
      data->data, s, options.limits,
      [&](const ImageInfo& info) -> absl::StatusOr<CropBox> {
        if (!region_input) return AugmentFor(key, info.height, info.width, options.augment).box;
        CropBox box = AugmentFor(key, data->height, data->width, options.augment).box;
        box.top -= data->region_top;
        box.left -= data->region_left;
        return box;
      },
      &region);
  if (!status.ok()) return status;
  std::string out(static_cast<size_t>(s) * s * 3, '\0');
  const Image8& image = region.image;
  ResizeAreaRgb(image.pixels.data(), image.height, image.width, image.width * image.channels,
                image.channels, region.x0, region.y0, region.x1, region.y1, s, s,
                reinterpret_cast<uint8_t*>(out.data()));
  data->data = std::move(out);
  data->height = s;
  data->width = s;
  data->region_top = 0;
  data->region_left = 0;
  return absl::OkStatus();
}

absl::Status FlipOp(const SampleKey& key, const PipelineOptions& options, StageData* data) {
  if (FlipFor(key, options.augment)) {
    FlipHorizontalRgb(reinterpret_cast<uint8_t*>(data->data.data()), data->height, data->width);
  }
  return absl::OkStatus();
}

absl::Status ToTensorOp(const SampleKey&, const PipelineOptions&, StageData* data) {
  std::string tensor(static_cast<size_t>(data->height) * data->width * 3 * sizeof(float), '\0');
  ToTensorNormalize(reinterpret_cast<const uint8_t*>(data->data.data()), data->height,
                    data->width, reinterpret_cast<float*>(tensor.data()));
  data->data = std::move(tensor);
  return absl::OkStatus();
}

absl::Status FeaturesOp(const SampleKey&, const PipelineOptions& options, StageData* data) {
  if (options.backbone == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", StageName(Stage::kFeatures),
                     " needs a backbone, and none is loaded (sophon-server --backbone, "
                     "or the training node's --backbone)"));
  }
  const int f = options.backbone->feature_size();
  thread_local std::vector<float> features;
  features.resize(static_cast<size_t>(f));
  if (absl::Status s = options.backbone->Extract(reinterpret_cast<const float*>(data->data.data()),
                                                 1, data->height, features.data());
      !s.ok()) {
    return s;
  }
  std::string out(static_cast<size_t>(f) * sizeof(uint16_t), '\0');
  FloatsToHalves(features.data(), features.size(), reinterpret_cast<uint16_t*>(out.data()));
  data->data = std::move(out);
  data->height = 1;
  data->width = f;
  return absl::OkStatus();
}

}  // namespace sophon
