// JPEG decoding with libjpeg-turbo. Plain buffers in and out; errors are
// returned, never raised (libjpeg's exit()-ing error handler is replaced).
#ifndef SOPHON_IMAGE_JPEG_CODEC_H_
#define SOPHON_IMAGE_JPEG_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/image/crop_box.h"

namespace sophon {

// What one decode may cost. A hostile file is small and claims much: a
// 155-byte progressive header can claim 10000 x 10000 (800 MB of DCT
// coefficients), a 14 KB file can hold 1000 scans (each a pass over every
// coefficient). Every limit is checked before the work or memory it bounds.
struct DecodeLimits {
  // Images with more pixels than this are rejected before any allocation
  // (a header can claim 65535 x 65535). Default: 100 megapixels.
  int64_t max_pixels = 100'000'000;
  // libjpeg's working memory (its max_memory_to_use), which above all holds
  // the DCT coefficients of a progressive or multi-scan image: about 2 bytes
  // per sample, width * height * 3 (4:2:0) to * 6 (4:4:4). A decode whose
  // coefficients would not fit is refused before they are allocated.
  // Default 256 MiB (a 4:2:0 progressive image up to about 89 megapixels).
  int64_t max_memory_bytes = int64_t{256} << 20;
  // Scans of a progressive image (libjpeg-turbo's own fuzzers stop at 500;
  // encoders write about 10). Default 256.
  int max_scans = 256;
  // The work of all scans together, which bounds the decode's CPU time: the
  // samples each scan decodes (64 per 8x8 block of each of its components),
  // summed over the scans. A usual progressive image of P pixels (4:2:0, 10
  // scans) needs about 8 P, a baseline one 1.5 P. Default 2.5e9: 25 times
  // the default max_pixels (about 0.7 s of CPU, where 256 scans of an image
  // within max_memory_bytes could take 3 s).
  int64_t max_scan_samples = 2'500'000'000;
  // false (strict): any corrupt-data warning from libjpeg (premature end of
  // data segment, extraneous bytes, bad Huffman code, ...) fails the decode
  // with DataLoss, instead of returning an image padded or patched by libjpeg.
  // true: such warnings are ignored, except a premature end of file.
  bool lenient = false;

  absl::Status Validate() const;
};

struct ImageInfo {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool progressive = false;
};

// 8-bit RGB (channels 3) or RGBX (channels 4, X unused), HWC, rows packed
// (stride = width * channels).
struct Image8 {
  int height = 0;
  int width = 0;
  int channels = 3;
  std::vector<uint8_t> pixels;
};

// Part of an image decoded at a reduced DCT scale, and where a crop box of the
// full-resolution image lies in it (fractional pixel coordinates of `image`).
struct DecodedRegion {
  Image8 image;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int scale_num = 8;  // decoded at scale_num / 8
};

// Errors of every function below: InvalidArgument for anything that is not a
// well-formed JPEG or is larger than max_pixels, ResourceExhausted naming the
// limit (DecodeLimits.max_memory_bytes, max_scans, max_scan_samples) for a decode
// that would need more, DataLoss naming libjpeg's warning for corrupt data
// under strict decoding.

// Reads only the header. InvalidArgument for anything that is not a
// well-formed JPEG within `limits`.
absl::StatusOr<ImageInfo> ReadJpegInfo(absl::string_view bytes, const DecodeLimits& limits);

// Full-resolution decode to RGB (gray and CMYK/YCCK are converted).
absl::StatusOr<Image8> DecodeJpeg(absl::string_view bytes, const DecodeLimits& limits);

// Reads the header, asks `choose_box` for the crop box of that image (its
// error is returned as is), then decodes just what the box needs, to RGBX: at
// the smallest scale M/8 (M = 1, 2, 4, 8) that keeps the box at least `min_side`
// pixels on each side, only the iMCU columns and the scanlines that the box
// covers. `out` may be reused across calls: its pixel buffer only grows, so
// image.pixels can be longer than height * width * 4. InvalidArgument if the
// box does not lie within the image.
absl::Status DecodeJpegCrop(absl::string_view bytes, int min_side, const DecodeLimits& limits,
                            absl::FunctionRef<absl::StatusOr<CropBox>(const ImageInfo&)> choose_box,
                            DecodedRegion* out);

// The scale M/8 at which DecodeJpegCrop decodes `box`: the smallest M in
// {1, 2, 4, 8} that keeps the box at least `min_side` pixels on each side.
int CropDecodeScale(const CropBox& box, int min_side);

// DecodeJpegCrop with a fixed box, into a new region (RGBX, pixels exactly
// height * width * 4 bytes).
absl::StatusOr<DecodedRegion> DecodeJpegRegion(absl::string_view bytes, const CropBox& box,
                                               int min_side, const DecodeLimits& limits);

}  // namespace sophon

#endif  // SOPHON_IMAGE_JPEG_CODEC_H_
