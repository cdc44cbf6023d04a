// A crop rectangle in source pixels: what the region decode and the lossless
// crop (jpeg_codec.h, jpeg_crop.h) take, and what augmentation draws
// (sophon/ops/augment.h).
#ifndef SOPHON_IMAGE_CROP_BOX_H_
#define SOPHON_IMAGE_CROP_BOX_H_

namespace sophon {

// A crop rectangle in source pixels, as torchvision's get_params returns it.
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

}  // namespace sophon

#endif  // SOPHON_IMAGE_CROP_BOX_H_
