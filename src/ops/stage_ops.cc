#include "sophon/ops/stage_ops.h"

#include <algorithm>
#include <cmath>
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

absl::Status PredictOp(const SampleKey&, const PipelineOptions& options, StageData* data) {
  const FeatureExtractor* model = options.backbone;
  if (model == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", StageName(Stage::kPredictions),
                     " needs a model, and none is loaded (sophon-server --backbone, "
                     "or the inference node's --model)"));
  }
  const int f = model->feature_size(), classes = model->num_classes();
  if (data->width != f) {
    return absl::InvalidArgumentError(absl::StrCat(StageName(Stage::kFeatures), " of ",
                                                   data->width, " values, but ",
                                                   model->description(), " takes ", f));
  }
  const int k = std::min(options.top_k, classes);
  if (k < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PipelineOptions.top_k must be >= 1 (got ", options.top_k, ") and ",
        model->description(), " must have classes (has ", classes, ")"));
  }
  thread_local std::vector<float> features, logits;
  features.resize(static_cast<size_t>(f));
  logits.resize(static_cast<size_t>(classes));
  HalvesToFloats(reinterpret_cast<const uint16_t*>(data->data.data()), features.size(),
                 features.data());
  if (absl::Status s = model->Classify(features.data(), 1, logits.data()); !s.ok()) return s;
  // Softmax in double, stable: exp(l - max) / sum.
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - top);
  thread_local std::vector<int> order;
  order.resize(static_cast<size_t>(classes));
  for (int c = 0; c < classes; ++c) order[c] = c;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::string out(static_cast<size_t>(2 * k) * sizeof(float), '\0');
  auto* pairs = reinterpret_cast<float*>(out.data());
  for (int i = 0; i < k; ++i) {
    const int c = order[i];
    pairs[2 * i] = static_cast<float>(c);
    pairs[2 * i + 1] = static_cast<float>(std::exp(static_cast<double>(logits[c]) - top) / sum);
  }
  data->data = std::move(out);
  data->height = 1;
  data->width = 2 * k;
  return absl::OkStatus();
}

}  // namespace sophon
