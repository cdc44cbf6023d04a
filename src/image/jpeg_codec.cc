#include "sophon/image/jpeg_codec.h"

// clang-format off
#include "src/image/jpeg_guard.h"
#include <jpegint.h>  // the entropy decoder's decode_mcu, the crop's iMCU columns, the upsampler
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

using jpeg_internal::CheckMarkers;
using jpeg_internal::CoefficientBytes;
using jpeg_internal::DefineSampleRows;
using jpeg_internal::ErrorManager;
using jpeg_internal::InitGuard;
using jpeg_internal::JumpedStatus;
using jpeg_internal::OutputRowsPerImcuRow;
using jpeg_internal::ScanMonitor;

// CMYK from libjpeg (Adobe files store it inverted) to RGB or RGBX (out_channels
// 3 or 4; X is 255), as PIL converts it.
void CmykToRgb(const uint8_t* in, int pixels, bool inverted, int out_channels, uint8_t* out) {
  for (int i = 0; i < pixels; ++i, out += out_channels) {
    int c = in[4 * i], m = in[4 * i + 1], y = in[4 * i + 2], k = in[4 * i + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    // inverted: value = 255 - ink, so RGB = value_c * value_k / 255.
    out[0] = static_cast<uint8_t>((c * k + 127) / 255);
    out[1] = static_cast<uint8_t>((m * k + 127) / 255);
    out[2] = static_cast<uint8_t>((y * k + 127) / 255);
    if (out_channels == 4) out[3] = 255;
  }
}

// libjpeg-turbo entropy-decodes every MCU of a scanline row, also those
// outside the columns jpeg_crop_scanline kept, and stores their coefficients,
// which nothing reads (only the kept columns go through the inverse DCT).
// This wrapper around the Huffman decoder's decode_mcu passes a null block row
// for those MCUs: the decoder then only parses their bits (keeping its DC
// predictors), as jpeg_skip_scanlines makes it do for whole rows. It relies on
// single-scan decoding, where decode_mcu is called for MCU columns 0, 1, ...,
// MCUs_per_row - 1 of each row in order (by the coefficient controller and by
// jpeg_skip_scanlines alike).
struct CropColumns {
  boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW* mcu) = nullptr;  // libjpeg's
  JDIMENSION first = 0, last = 0;  // kept MCU columns
  JDIMENSION per_row = 0;
  JDIMENSION next = 0;             // column of the next call
};

boolean DecodeMcuInCrop(j_decompress_ptr cinfo, JBLOCKROW* mcu) {
  auto* crop = static_cast<CropColumns*>(cinfo->client_data);
  const JDIMENSION col = crop->next;
  crop->next = col + 1 == crop->per_row ? 0 : col + 1;
  return crop->decode_mcu(cinfo, col < crop->first || col > crop->last ? nullptr : mcu);
}

// What a decode should produce: the whole image in RGB, or the box that
// `choose_box` picks once the header is known, in RGBX at a reduced scale.
struct DecodeRequest {
  absl::FunctionRef<absl::StatusOr<CropBox>(const ImageInfo&)>* choose_box = nullptr;
  int min_side = 0;
};

// One decode. All objects with destructors are created before setjmp, so the
// longjmp from libjpeg's error handler skips nothing that needs cleanup.
// `out->image.pixels` is reused: it only grows.
absl::Status Decode(absl::string_view bytes, const DecodeLimits& limits,
                    const DecodeRequest& request, ImageInfo* info, DecodedRegion* out) {
  if (absl::Status s = CheckMarkers(bytes); !s.ok()) return s;
  absl::StatusOr<CropBox> chosen = CropBox{};
  CropColumns crop_columns;
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  ScanMonitor monitor;
  InitGuard(limits, &err, &monitor);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return JumpedStatus(err);
  }
  jpeg_create_decompress(&cinfo);
  DefineSampleRows(&cinfo);  // libjpeg's SIMD padding, never output: see jpeg_guard.cc
  cinfo.mem->max_memory_to_use = static_cast<long>(limits.max_memory_bytes);
  cinfo.progress = &monitor.pub;
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  info->width = static_cast<int>(cinfo.image_width);
  info->height = static_cast<int>(cinfo.image_height);
  info->components = cinfo.num_components;
  info->progressive = cinfo.progressive_mode != 0;
  const int64_t pixels = static_cast<int64_t>(info->width) * info->height;
  if (info->width <= 0 || info->height <= 0 || pixels > limits.max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("image dimensions ", info->width, "x",
                                                   info->height, " exceed the limit of ",
                                                   limits.max_pixels, " pixels"));
  }
  if (out == nullptr) {  // header only
    jpeg_destroy_decompress(&cinfo);
    return absl::OkStatus();
  }
  // A progressive (or multi-scan) image is decoded whole into coefficient
  // arrays before the first row comes out: refuse them before they exist.
  if (cinfo.progressive_mode || cinfo.inputctl->has_multiple_scans) {
    const int64_t coefficients = CoefficientBytes(cinfo);
    if (coefficients > limits.max_memory_bytes) {
      jpeg_destroy_decompress(&cinfo);
      return absl::ResourceExhaustedError(absl::StrCat(
          "a ", cinfo.progressive_mode ? "progressive" : "multi-scan", " ", info->width, "x",
          info->height, " image needs ", coefficients,
          " bytes of DCT coefficients, more than DecodeLimits.max_memory_bytes (",
          limits.max_memory_bytes, ")"));
    }
  }

  const bool region = request.choose_box != nullptr;
  const int channels = region ? 4 : 3;
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : (region ? JCS_EXT_RGBX : JCS_RGB);
  cinfo.dct_method = JDCT_ISLOW;

  CropBox box{0, 0, info->height, info->width};
  int scale = 8;
  if (region) {
    chosen = (*request.choose_box)(*info);
    if (!chosen.ok()) {
      jpeg_destroy_decompress(&cinfo);
      return chosen.status();
    }
    box = *chosen;
    if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 ||
        box.top + box.height > info->height || box.left + box.width > info->width) {
      jpeg_destroy_decompress(&cinfo);
      return absl::InvalidArgumentError(absl::StrCat(
          "crop box (top ", box.top, ", left ", box.left, ", ", box.height, "x", box.width,
          ") outside the ", info->height, "x", info->width, " image"));
    }
    scale = CropDecodeScale(box, request.min_side);
  }
  cinfo.scale_num = static_cast<unsigned>(scale);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);

  const int out_w = static_cast<int>(cinfo.output_width);
  const int out_h = static_cast<int>(cinfo.output_height);
  const double s = scale / 8.0;
  const double bx0 = box.left * s, bx1 = std::min<double>((box.left + box.width) * s, out_w);
  const double by0 = box.top * s, by1 = std::min<double>((box.top + box.height) * s, out_h);
  JDIMENSION col0 = static_cast<JDIMENSION>(std::floor(bx0));
  JDIMENSION cols = static_cast<JDIMENSION>(std::min<int>(
                        static_cast<int>(std::ceil(bx1)), out_w)) - col0;
  if (cols == 0) cols = 1;
  if (col0 > 0 || cols < static_cast<JDIMENSION>(out_w)) {
    jpeg_crop_scanline(&cinfo, &col0, &cols);  // widens to iMCU boundaries
    // Single-scan (baseline, interleaved or one component) only: there
    // decode_mcu runs row by row as the rows are read or skipped.
    if (!cinfo.progressive_mode && !cinfo.buffered_image && !cinfo.inputctl->has_multiple_scans &&
        cinfo.entropy != nullptr && cinfo.master != nullptr) {
      crop_columns.decode_mcu = cinfo.entropy->decode_mcu;
      crop_columns.first = cinfo.master->first_iMCU_col;
      crop_columns.last = cinfo.master->last_iMCU_col;
      crop_columns.per_row = cinfo.MCUs_per_row;
      cinfo.client_data = &crop_columns;
      cinfo.entropy->decode_mcu = DecodeMcuInCrop;
    }
  }
  const int row0 = static_cast<int>(std::floor(by0));
  const int row1 = std::max(row0 + 1, std::min(static_cast<int>(std::ceil(by1)), out_h));
  // Rows above the box are skipped. An upsampler that reads the chroma rows
  // above and below (4:2:0 and 4:4:0 at full scale) would see, for the
  // first iMCU row after a skip, rows that jpeg_skip_scanlines never decoded
  // (uninitialised memory): skip only to the start of the box's iMCU row,
  // which libjpeg reaches by decoding the iMCU row before it, and read and
  // drop the rows of that iMCU row above the box. The kept rows are then
  // those of a full decode, and depend on no iMCU row above the one before
  // the box's (what a lossless crop of the file keeps, jpeg_crop.h).
  int skip = row0;
  if (cinfo.upsample != nullptr && cinfo.upsample->need_context_rows) {
    const int lines_per_imcu_row = OutputRowsPerImcuRow(cinfo);
    skip = row0 / lines_per_imcu_row * lines_per_imcu_row;
  }
  if (skip > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(skip));

  const int width = static_cast<int>(cinfo.output_width);  // after cropping
  const int comps = cinfo.output_components;
  const int rows = row1 - row0;
  const size_t stride = static_cast<size_t>(width) * channels;
  out->image.height = rows;
  out->image.width = width;
  out->image.channels = channels;
  if (out->image.pixels.size() < rows * stride) out->image.pixels.resize(rows * stride);
  uint8_t* cmyk_row = nullptr;
  if (cmyk) {  // one spare row past the image for libjpeg's CMYK output
    const size_t need = rows * stride + static_cast<size_t>(width) * 4;
    if (out->image.pixels.size() < need) out->image.pixels.resize(need);
    cmyk_row = out->image.pixels.data() + rows * stride;
  }
  const bool inverted = cinfo.saw_Adobe_marker != 0;
  for (int r = skip; r < row0; ++r) {  // above the box, in its iMCU row: dropped
    JSAMPROW row = cmyk ? cmyk_row : out->image.pixels.data();
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      jpeg_destroy_decompress(&cinfo);
      return absl::InvalidArgumentError("truncated JPEG data");
    }
  }
  for (int r = 0; r < rows; ++r) {
    uint8_t* dst = out->image.pixels.data() + r * stride;
    JSAMPROW row = cmyk ? cmyk_row : dst;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      jpeg_destroy_decompress(&cinfo);
      return absl::InvalidArgumentError("truncated JPEG data");
    }
    if (cmyk) CmykToRgb(cmyk_row, width, inverted, channels, dst);
  }
  const bool eof = err.premature_eof;
  // Stops early when the box ends above the bottom: abort, do not finish.
  jpeg_destroy_decompress(&cinfo);
  if (eof) return absl::InvalidArgumentError("truncated JPEG data (premature end of file)");
  if (comps != channels && !(cmyk && comps == 4)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported output components ", comps));
  }
  out->x0 = bx0 - col0;
  out->x1 = bx1 - col0;
  out->y0 = by0 - row0;
  out->y1 = by1 - row0;
  out->scale_num = scale;
  return absl::OkStatus();
}

}  // namespace

int CropDecodeScale(const CropBox& box, int min_side) {
  // libjpeg-turbo has SIMD inverse DCTs only for M = 1, 2, 4, 8; the others
  // are plain C (and for 2x2-subsampled chroma at M = 5..7, a 10x10..14x14
  // IDCT), which costs more than the extra pixels of the next power of two.
  int scale = 1;
  for (; scale < 8; scale *= 2) {
    if (static_cast<int64_t>(box.width) * scale >= 8LL * min_side &&
        static_cast<int64_t>(box.height) * scale >= 8LL * min_side) {
      break;
    }
  }
  return scale;
}

absl::Status DecodeLimits::Validate() const {
  if (max_pixels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeLimits.max_pixels must be >= 1, got ", max_pixels));
  }
  if (max_memory_bytes < (int64_t{1} << 20) || max_memory_bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DecodeLimits.max_memory_bytes must be in [1 MiB, 1 TiB], got ", max_memory_bytes));
  }
  if (max_scan_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeLimits.max_scan_samples must be >= 1, got ", max_scan_samples));
  }
  if (max_scans < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeLimits.max_scans must be >= 1, got ", max_scans));
  }
  return absl::OkStatus();
}

absl::StatusOr<ImageInfo> ReadJpegInfo(absl::string_view bytes, const DecodeLimits& limits) {
  ImageInfo info;
  if (absl::Status s = Decode(bytes, limits, DecodeRequest{}, &info, nullptr); !s.ok()) {
    return s;
  }
  return info;
}

absl::StatusOr<Image8> DecodeJpeg(absl::string_view bytes, const DecodeLimits& limits) {
  ImageInfo info;
  DecodedRegion region;
  if (absl::Status s = Decode(bytes, limits, DecodeRequest{}, &info, &region); !s.ok()) {
    return s;
  }
  region.image.pixels.resize(static_cast<size_t>(region.image.height) * region.image.width * 3);
  return std::move(region.image);
}

absl::Status DecodeJpegCrop(absl::string_view bytes, int min_side, const DecodeLimits& limits,
                            absl::FunctionRef<absl::StatusOr<CropBox>(const ImageInfo&)> choose_box,
                            DecodedRegion* out) {
  ImageInfo info;
  DecodeRequest request;
  request.choose_box = &choose_box;
  request.min_side = min_side;
  return Decode(bytes, limits, request, &info, out);
}

absl::StatusOr<DecodedRegion> DecodeJpegRegion(absl::string_view bytes, const CropBox& box,
                                               int min_side, const DecodeLimits& limits) {
  DecodedRegion region;
  absl::Status s = DecodeJpegCrop(
      bytes, min_side, limits, [&box](const ImageInfo&) -> absl::StatusOr<CropBox> { return box; },
      &region);
  if (!s.ok()) return s;
  region.image.pixels.resize(static_cast<size_t>(region.image.height) * region.image.width * 4);
  return region;
}

}  // namespace sophon
