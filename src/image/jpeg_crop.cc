#include "sophon/image/jpeg_crop.h"

// clang-format off
#include "src/image/cut_source.h"
#include "src/image/huffman_tables.h"
#include "src/image/jpeg_guard.h"
// clang-format on

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

using jpeg_internal::CheckMarkers;
using jpeg_internal::CoefficientBytes;
using jpeg_internal::CutSource;
using jpeg_internal::ErrorManager;
using jpeg_internal::InitGuard;
using jpeg_internal::InstallFittedHuffmanTables;
using jpeg_internal::JumpedStatus;
using jpeg_internal::ScanMonitor;
using jpeg_internal::StopAfterRows;
using jpeg_internal::UseCutSource;

int FloorTo(int v, int step) { return v / step * step; }

int64_t RoundUp(int64_t v, int64_t step) { return (v + step - 1) / step * step; }

// Frees what jpeg_mem_dest allocated.
struct MemDest {
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  ~MemDest() { std::free(buffer); }
};

}  // namespace

RegionBounds CropRegionBounds(const CropBox& box, int image_height, int image_width,
                              int imcu_height, int imcu_width, int scale, bool row_context) {
  // Columns: the iMCU columns of the box. DecodeJpegCrop crops its scanlines
  // to these (jpeg_crop_scanline), treating the crop's edges as the image's,
  // so it reads nothing to the left or right of them.
  // Rows: the box's iMCU rows. With row context, the upsampler makes an
  // output row 2k from chroma rows k and k - 1, and row 2k + 1 from k and
  // k + 1: of the rows DecodeJpegCrop keeps (floor(top * scale / 8) to
  // ceil(bottom * scale / 8) at the decode's scale), only the first row of
  // an iMCU row reads the iMCU row above (which DecodeJpegCrop decodes when
  // it skips to the box), and only its last row the one below (read ahead).
  // The region takes the iMCU row above or below only when a kept row reads
  // it: inside the region the decoder would replicate its edge instead.
  RegionBounds r;
  r.left = FloorTo(box.left, imcu_width);
  const int right =
      std::min(image_width, FloorTo(box.left + box.width - 1, imcu_width) + imcu_width);
  r.top = FloorTo(box.top, imcu_height);
  int bottom = FloorTo(box.top + box.height - 1, imcu_height) + imcu_height;
  if (row_context) {
    const int64_t lines = static_cast<int64_t>(imcu_height) * scale / DCTSIZE;  // per iMCU row
    const int64_t first = static_cast<int64_t>(box.top) * scale / DCTSIZE;
    const int64_t end = (static_cast<int64_t>(box.top + box.height) * scale + DCTSIZE - 1) / DCTSIZE;
    if (lines <= 0 || first % lines == 0) r.top = std::max(0, r.top - imcu_height);
    if (lines <= 0 || end % lines == 0) bottom += imcu_height;
  }
  bottom = std::min(image_height, bottom);
  r.width = right - r.left;
  r.height = bottom - r.top;
  return r;
}

bool UpsamplesWithRowContext(const jpeg_decompress_struct& cinfo, int scale) {
  // libjpeg (jdmaster.c) first enlarges a subsampled component's inverse DCT
  // while that halves the upsampling in both directions; what is left of the
  // vertical factor is upsampled (jdsample.c), by the "fancy" h2v2 and h1v2
  // upsamplers with the rows above and below. Any vertical upsampling left
  // counts here (a superset: libjpeg replicates rows at scale 1/8).
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    int size = scale;
    while (size < DCTSIZE && (cinfo.max_h_samp_factor * scale) % (comp.h_samp_factor * size * 2) == 0 &&
           (cinfo.max_v_samp_factor * scale) % (comp.v_samp_factor * size * 2) == 0) {
      size *= 2;
    }
    if (comp.v_samp_factor * size < cinfo.max_v_samp_factor * scale) return true;
  }
  return false;
}

namespace {

// The size of a component's inverse DCT in a decode at scale/8, as
// UpsamplesWithRowContext computes it.
int ScaledDctSize(const jpeg_decompress_struct& cinfo, const jpeg_component_info& comp,
                  int scale) {
  int size = scale;
  while (size < DCTSIZE && (cinfo.max_h_samp_factor * scale) % (comp.h_samp_factor * size * 2) == 0 &&
         (cinfo.max_v_samp_factor * scale) % (comp.v_samp_factor * size * 2) == 0) {
    size *= 2;
  }
  return size;
}

// libjpeg's "fancy" upsamplers that double a component horizontally (h2v1,
// h2v2; jdsample.c) filter it only where it is more than 2 samples wide at
// the decode's scale (downsampled_width, from the file's width before
// jpeg_crop_scanline narrows it), and replicate samples otherwise. Whether a
// region `width` pixels wide has such a component 2 samples wide or less,
// where the image_width-pixel image has it wider: the region's decode would
// replicate where the whole file's is filtered.
bool NarrowForTheUpsampler(const jpeg_decompress_struct& cinfo, int scale, int width,
                           int image_width) {
  if (scale == 1) return false;  // libjpeg filters nothing at 1/8
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    const int size = ScaledDctSize(cinfo, comp, scale);
    const int h_in = comp.h_samp_factor * size / scale;  // libjpeg's h_in_group
    if (h_in * 2 != cinfo.max_h_samp_factor) continue;
    const int64_t per = static_cast<int64_t>(comp.h_samp_factor) * size;
    const int64_t of = static_cast<int64_t>(cinfo.max_h_samp_factor) * DCTSIZE;
    if ((width * per + of - 1) / of <= 2 && (image_width * per + of - 1) / of > 2) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<JpegRegion> CropJpegLossless(
    absl::string_view bytes, int min_side, const DecodeLimits& limits,
    absl::FunctionRef<absl::StatusOr<CropBox>(const ImageInfo&)> choose_box) {
  if (absl::Status s = CheckMarkers(bytes); !s.ok()) return s;
  // Everything with a destructor exists before setjmp: the longjmp from
  // libjpeg's error handler skips no cleanup.
  JpegRegion out;
  absl::StatusOr<CropBox> chosen = CropBox{};
  MemDest dest;
  CutSource source;
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  // Set after setjmp and read after the longjmp: volatile, or the handler may
  // see its value at setjmp (false) and leak the encoder.
  volatile bool dst_created = false;
  ErrorManager err;
  ScanMonitor monitor;
  InitGuard(limits, &err, &monitor);
  src.err = &err.pub;
  dst.err = &err.pub;
  // Set while the region is written: an error there (coefficients a lenient
  // read let through that the encoder refuses) is the region's, not the
  // file's, which decodes: decline, and the file is sent whole.
  volatile bool writing = false;
  if (setjmp(err.jump)) {
    if (dst_created) jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    if (writing) {
      return absl::UnimplementedError(
          absl::StrCat("cannot crop losslessly: the region cannot be written (", err.message, ")"));
    }
    return JumpedStatus(err);
  }
  jpeg_create_decompress(&src);
  src.mem->max_memory_to_use = static_cast<long>(limits.max_memory_bytes);
  src.progress = &monitor.pub;
  UseCutSource(&src, bytes, &err, &source);
  jpeg_read_header(&src, TRUE);
  auto fail = [&](absl::Status status) {
    jpeg_destroy_decompress(&src);
    return status;
  };
  const int width = static_cast<int>(src.image_width);
  const int height = static_cast<int>(src.image_height);
  if (width <= 0 || height <= 0 ||
      static_cast<int64_t>(width) * height > limits.max_pixels) {
    return fail(absl::InvalidArgumentError(absl::StrCat("image dimensions ", width, "x", height,
                                                        " exceed the limit of ",
                                                        limits.max_pixels, " pixels")));
  }
  if (src.data_precision != 8) {
    return fail(absl::UnimplementedError(
        absl::StrCat("cannot crop losslessly: ", src.data_precision, "-bit samples")));
  }
  if (src.num_components != 1 && src.num_components != 3 && src.num_components != 4) {
    return fail(absl::UnimplementedError(
        absl::StrCat("cannot crop losslessly: ", src.num_components, " components")));
  }
  // libjpeg upsamples only by whole factors: every component's sampling
  // factors divide the largest (others cannot be decoded either).
  for (int c = 0; c < src.num_components; ++c) {
    const jpeg_component_info& comp = src.comp_info[c];
    if (comp.h_samp_factor < 1 || comp.v_samp_factor < 1 ||
        src.max_h_samp_factor % comp.h_samp_factor != 0 ||
        src.max_v_samp_factor % comp.v_samp_factor != 0) {
      return fail(absl::UnimplementedError(absl::StrCat(
          "cannot crop losslessly: component ", c, " sampled ", comp.h_samp_factor, "x",
          comp.v_samp_factor, " of ", src.max_h_samp_factor, "x", src.max_v_samp_factor)));
    }
    // A plane between full and lowest resolution in a direction (4:2:0 luma
    // with 1x4 chroma, say) is upsampled in a way the region does not
    // reproduce: the crop is tested, and right, where every factor is 1 or
    // the largest.
    if ((comp.h_samp_factor != 1 && comp.h_samp_factor != src.max_h_samp_factor) ||
        (comp.v_samp_factor != 1 && comp.v_samp_factor != src.max_v_samp_factor)) {
      return fail(absl::UnimplementedError(absl::StrCat(
          "cannot crop losslessly: component ", c, " sampled ", comp.h_samp_factor, "x",
          comp.v_samp_factor, " of ", src.max_h_samp_factor, "x", src.max_v_samp_factor,
          ", neither full nor lowest resolution")));
    }
  }
  ImageInfo info;
  info.width = width;
  info.height = height;
  info.components = src.num_components;
  info.progressive = src.progressive_mode != 0;
  chosen = choose_box(info);
  if (!chosen.ok()) return fail(chosen.status());
  const CropBox box = *chosen;
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 ||
      box.top + box.height > height || box.left + box.width > width) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "crop box (top ", box.top, ", left ", box.left, ", ", box.height, "x", box.width,
        ") outside the ", height, "x", width, " image")));
  }
  const int imcu_w = 8 * src.max_h_samp_factor, imcu_h = 8 * src.max_v_samp_factor;
  const int scale = CropDecodeScale(box, min_side);
  RegionBounds region = CropRegionBounds(box, height, width, imcu_h, imcu_w, scale,
                                         UpsamplesWithRowContext(src, scale));
  // A region too narrow for the fancy upsampler gets whole iMCU columns
  // more, on the left while there are some, then on the right.
  while (region.width < width && NarrowForTheUpsampler(src, scale, region.width, width)) {
    if (region.left > 0) {
      region.left -= imcu_w;
      region.width += imcu_w;
    } else {
      region.width = std::min(width - region.left, region.width + imcu_w);
    }
  }

  // The region's coefficient arrays, in blocks, padded to whole MCUs as
  // libjpeg's coefficient controller reads them.
  struct Plane {
    JDIMENSION width_blocks, height_blocks;  // padded
    JDIMENSION left_blocks, top_blocks;      // the region's offset in the source
  };
  Plane planes[MAX_COMPONENTS];
  int64_t region_bytes = 0;
  for (int c = 0; c < src.num_components; ++c) {
    const jpeg_component_info& comp = src.comp_info[c];
    const int64_t hs = comp.h_samp_factor, vs = comp.v_samp_factor;
    const int64_t w = (static_cast<int64_t>(region.width) * hs + imcu_w - 1) / imcu_w;
    const int64_t h = (static_cast<int64_t>(region.height) * vs + imcu_h - 1) / imcu_h;
    planes[c].width_blocks = static_cast<JDIMENSION>(RoundUp(w, hs));
    planes[c].height_blocks = static_cast<JDIMENSION>(RoundUp(h, vs));
    planes[c].left_blocks = static_cast<JDIMENSION>(region.left / imcu_w * hs);
    planes[c].top_blocks = static_cast<JDIMENSION>(region.top / imcu_h * vs);
    region_bytes += static_cast<int64_t>(planes[c].width_blocks) * planes[c].height_blocks *
                    DCTSIZE2 * static_cast<int64_t>(sizeof(JCOEF));
  }
  // Reading coefficients holds the whole image's (any file, not only a
  // progressive one): refuse before they are allocated.
  const int64_t needed = CoefficientBytes(src) + region_bytes;
  if (needed > limits.max_memory_bytes) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "a lossless crop of a ", width, "x", height, " image needs ", needed,
        " bytes of DCT coefficients, more than DecodeLimits.max_memory_bytes (",
        limits.max_memory_bytes, ")")));
  }
  jvirt_barray_ptr region_arrays[MAX_COMPONENTS];
  for (int c = 0; c < src.num_components; ++c) {
    region_arrays[c] = (*src.mem->request_virt_barray)(
        reinterpret_cast<j_common_ptr>(&src), JPOOL_IMAGE, FALSE, planes[c].width_blocks,
        planes[c].height_blocks, static_cast<JDIMENSION>(src.comp_info[c].v_samp_factor));
  }
  // Nothing below the region is read (in a file of one scan).
  if (region.top + region.height < height) {
    StopAfterRows(&src, static_cast<JDIMENSION>((region.top + region.height) / imcu_h));
  }
  jvirt_barray_ptr* source_arrays = jpeg_read_coefficients(&src);
  if (err.premature_eof) {
    return fail(absl::InvalidArgumentError("truncated JPEG data (premature end of file)"));
  }
  // A lenient read lets corrupt data through; how libjpeg fills in for it
  // depends on how the file is read (a decode skips and crops rows and
  // columns, the crop reads everything): such a file is sent whole, to be
  // decoded as in every other mode.
  if (err.corrupt_warnings > 0) {
    return fail(absl::UnimplementedError(
        "cannot crop losslessly: the file has corrupt data (read leniently)"));
  }
  // A progressive file whose scans leave some coefficient unrefined is
  // decoded with block smoothing (estimates from the neighbouring blocks'
  // DC values), which a sequential copy would not get.
  if (src.progressive_mode && src.coef_bits != nullptr) {
    for (int c = 0; c < src.num_components; ++c) {
      for (int k = 0; k < DCTSIZE2; ++k) {
        if (src.coef_bits[c][k] != 0) {
          return fail(absl::UnimplementedError(absl::StrCat(
              "cannot crop losslessly: the progressive scans leave coefficient ", k,
              " of component ", c, " unrefined (",
              src.coef_bits[c][k] < 0 ? "never sent" : "low bits missing", ")")));
        }
      }
    }
  }
  // Copy the region's blocks, a block row at a time.
  for (int c = 0; c < src.num_components; ++c) {
    const Plane& p = planes[c];
    const jpeg_component_info& comp = src.comp_info[c];
    const JDIMENSION src_rows = static_cast<JDIMENSION>(
        RoundUp(comp.height_in_blocks, comp.v_samp_factor));
    const JDIMENSION src_cols = static_cast<JDIMENSION>(
        RoundUp(comp.width_in_blocks, comp.h_samp_factor));
    for (JDIMENSION row = 0; row < p.height_blocks; ++row) {
      JBLOCKARRAY to = (*src.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&src),
                                                       region_arrays[c], row, 1, TRUE);
      const JDIMENSION from_row = p.top_blocks + row;
      if (from_row >= src_rows) {  // cannot happen: the region lies in the image
        std::memset(to[0], 0, sizeof(JBLOCK) * p.width_blocks);
        continue;
      }
      JBLOCKARRAY from = (*src.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&src),
                                                         source_arrays[c], from_row, 1, FALSE);
      const JDIMENSION n = std::min(p.width_blocks, src_cols - std::min(src_cols, p.left_blocks));
      std::memcpy(to[0], from[0] + p.left_blocks, sizeof(JBLOCK) * n);
      if (n < p.width_blocks) std::memset(to[0] + n, 0, sizeof(JBLOCK) * (p.width_blocks - n));
    }
  }

  jpeg_create_compress(&dst);
  dst_created = true;
  writing = true;
  jpeg_mem_dest(&dst, &dest.buffer, &dest.size);
  jpeg_copy_critical_parameters(&src, &dst);
  dst.image_width = static_cast<JDIMENSION>(region.width);
  dst.image_height = static_cast<JDIMENSION>(region.height);
  // Tables fitted to the region, counted here: libjpeg's optimize_coding
  // would cost a second pass of its encoder, three times the writing pass.
  dst.optimize_coding = FALSE;
  // The decoder tells colour models apart by these markers: an Adobe marker
  // makes CMYK inverted, so the region has one only if the file had one.
  if (src.num_components == 4) dst.write_Adobe_marker = src.saw_Adobe_marker;
  if (!InstallFittedHuffmanTables(&dst, reinterpret_cast<j_common_ptr>(&src), region_arrays)) {
    jpeg_destroy_compress(&dst);
    dst_created = false;
    return fail(absl::UnimplementedError(
        "cannot crop losslessly: the region cannot be written (DCT coefficient out of range)"));
  }
  jpeg_write_coefficients(&dst, region_arrays);
  jpeg_finish_compress(&dst);
  jpeg_destroy_compress(&dst);
  dst_created = false;
  writing = false;
  jpeg_finish_decompress(&src);
  jpeg_destroy_decompress(&src);
  out.jpeg.assign(reinterpret_cast<const char*>(dest.buffer), dest.size);
  out.image_height = height;
  out.image_width = width;
  out.top = region.top;
  out.left = region.left;
  out.height = region.height;
  out.width = region.width;
  return out;
}

}  // namespace sophon
