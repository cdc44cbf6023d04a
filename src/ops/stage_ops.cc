#include "sophon/ops/stage_ops.h"

#include <string>

#include "sophon/image/image_ops.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/pipeline.h"

namespace sophon {

absl::Status DecodeCropOp(const SampleKey& key, const PipelineOptions& options, StageData* data) {
  const int s = options.augment.crop_size;
  // The crop box depends on the image size, so it is chosen once the header
  // is read, within the same decode.
  thread_local DecodedRegion region;  // reused: no allocation in steady state
  absl::Status status = DecodeJpegCrop(
      data->data, s, options.limits,
      [&](const ImageInfo& info) -> absl::StatusOr<CropBox> {
        return AugmentFor(key, info.height, info.width, options.augment).box;
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

}  // namespace sophon
