// Lossless JPEG crop: the part of a JPEG around a crop box, cut out in the DCT
// domain (its coefficients copied, nothing decoded to pixels) and written as
// a JPEG of its own. Decoding that region with DecodeJpegCrop gives, inside
// the box, exactly the pixels that decoding the whole file gives.
#ifndef SOPHON_IMAGE_JPEG_CROP_H_
#define SOPHON_IMAGE_JPEG_CROP_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/image/crop_box.h"
#include "sophon/image/jpeg_codec.h"

namespace sophon {

// A region of a JPEG image as a JPEG of its own, and where it lies.
struct JpegRegion {
  std::string jpeg;      // a complete JPEG file of the region
  int image_height = 0;  // the whole image's size
  int image_width = 0;
  int top = 0;  // the region's offset in the whole image: multiples of its iMCU size
  int left = 0;
  int height = 0;  // the region's size
  int width = 0;
};

// The region of an image_height x image_width JPEG that a crop of `box` needs
// so that DecodeJpegCrop(region, box - offset, min_side) reproduces
// DecodeJpegCrop(whole file, box, min_side) inside the box: the iMCU columns
// and rows the box touches and, with `row_context` (the decode at the box's
// scale, scale/8, upsamples chroma vertically from the rows above and below),
// the iMCU row above where the first row the decode keeps is the first of its
// iMCU row, and the one below where the last row it keeps is the last of its
// iMCU row. imcu_width/height are 8 x the largest sampling factors.
struct RegionBounds {
  int top = 0, left = 0, height = 0, width = 0;
};
RegionBounds CropRegionBounds(const CropBox& box, int image_height, int image_width,
                              int imcu_height, int imcu_width, int scale, bool row_context);

// Reads the header, asks `choose_box` for the crop box (its error is returned
// as is), and writes the region CropRegionBounds names as a JPEG (widened by
// whole iMCU columns where a horizontally subsampled component would be 2
// samples wide or less at the box's decode scale: libjpeg upsamples such a
// component without the filter it applies to the whole file): the same
// quantization tables, sampling factors and colour model, the region's DCT
// coefficients copied unchanged, sequential Huffman coding with tables
// optimised for the region (a progressive or arithmetic-coded file is
// transcoded). DecodeLimits apply as to a decode (the whole image's
// coefficients are held while the region is cut: they are checked against
// max_memory_bytes before they exist).
//
// Errors: those of DecodeJpegCrop for a file that is not a well-formed JPEG
// within the limits; Unimplemented, naming the reason, for a well-formed file
// that cannot be cropped so that its pixels stay the same (a progressive file
// whose scans leave coefficients unrefined, which the decoder smooths across
// blocks; sampling factors libjpeg cannot upsample; data precision other than
// 8 bits; coefficients the encoder refuses to write, which a lenient read can
// let through): serve such a file whole.
absl::StatusOr<JpegRegion> CropJpegLossless(
    absl::string_view bytes, int min_side, const DecodeLimits& limits,
    absl::FunctionRef<absl::StatusOr<CropBox>(const ImageInfo&)> choose_box);

}  // namespace sophon

#endif  // SOPHON_IMAGE_JPEG_CROP_H_
