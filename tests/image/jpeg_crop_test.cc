#include "sophon/image/jpeg_crop.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on
#include <malloc.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/image/image_ops.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/augment.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::JpegColor;
using testing::MakeTestImage;
using testing::Sampling;

constexpr int kMinSide = 48;  // crops of 96..480 pixels decode at every scale

absl::StatusOr<JpegRegion> Crop(const std::string& jpeg, const CropBox& box,
                                const DecodeLimits& limits = DecodeLimits(),
                                int min_side = kMinSide) {
  return CropJpegLossless(jpeg, min_side, limits,
                          [&](const ImageInfo&) -> absl::StatusOr<CropBox> { return box; });
}

// The crop box's pixels as DecodeJpegCrop gives them, and their S x S resize.
struct BoxPixels {
  int scale = 0;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  std::vector<uint8_t> rgb;      // the rows and columns the box touches
  std::vector<uint8_t> resized;  // kMinSide x kMinSide x 3
};

BoxPixels DecodeBox(const std::string& jpeg, const CropBox& box, int min_side = kMinSide) {
  BoxPixels out;
  absl::StatusOr<DecodedRegion> r = DecodeJpegRegion(jpeg, box, min_side, DecodeLimits());
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  out.scale = r->scale_num;
  out.x0 = r->x0, out.y0 = r->y0, out.x1 = r->x1, out.y1 = r->y1;
  const int c0 = static_cast<int>(std::floor(r->x0)), c1 = static_cast<int>(std::ceil(r->x1));
  const int r0 = static_cast<int>(std::floor(r->y0)), r1 = static_cast<int>(std::ceil(r->y1));
  for (int y = r0; y < r1; ++y) {
    for (int x = c0; x < c1; ++x) {
      const uint8_t* p = r->image.pixels.data() + (static_cast<size_t>(y) * r->image.width + x) * 4;
      out.rgb.insert(out.rgb.end(), p, p + 3);
    }
  }
  out.resized.resize(static_cast<size_t>(kMinSide) * kMinSide * 3);
  ResizeAreaRgb(r->image.pixels.data(), r->image.height, r->image.width, r->image.width * 4, 4,
                r->x0, r->y0, r->x1, r->y1, kMinSide, kMinSide, out.resized.data());
  return out;
}

using Variant = testing::NamedEncoding;
std::vector<Variant> AllVariants() { return testing::AllJpegEncodings(); }

// The boxes a training run would draw, and boxes on every edge and corner.
std::vector<CropBox> BoxesFor(int height, int width) {
  std::vector<CropBox> boxes;
  AugmentOptions augment;
  augment.crop_size = kMinSide;
  for (uint64_t id = 0; id < 24; ++id) {
    boxes.push_back(AugmentFor({3, 0, id}, height, width, augment).box);
  }
  boxes.push_back({0, 0, 60, 70});
  boxes.push_back({height - 61, width - 53, 61, 53});
  boxes.push_back({0, width - 200, 150, 200});
  boxes.push_back({height - 333, 0, 333, 250});
  boxes.push_back({0, 0, height, width});
  boxes.push_back({17, 9, 1, 1});
  boxes.push_back({200, 300, 70, 90});  // inside, at the full scale
  boxes.push_back({133, 77, 85, 60});
  return boxes;
}

// The heart of the stage: for every encoding and every box, decoding the
// region gives the bytes that decoding the whole file gives inside the box.
TEST(JpegCropTest, RegionDecodesToTheWholeFilesPixels) {
  const int kHeight = 477, kWidth = 631;  // partial iMCUs on the right and at the bottom
  const Image8 img = MakeTestImage(kHeight, kWidth, 11);
  for (const Variant& variant : AllVariants()) {
    SCOPED_TRACE(variant.name);
    const std::string jpeg = EncodeJpeg(img, variant.options);
    int scales[9] = {};
    int64_t region_bytes = 0;
    const std::vector<CropBox> boxes = BoxesFor(kHeight, kWidth);
    for (const CropBox& box : boxes) {
      SCOPED_TRACE(absl::StrCat("box top ", box.top, " left ", box.left, " ", box.height, "x",
                                box.width));
      absl::StatusOr<JpegRegion> region = Crop(jpeg, box);
      ASSERT_TRUE(region.ok()) << region.status();
      EXPECT_EQ(region->image_height, kHeight);
      EXPECT_EQ(region->image_width, kWidth);
      EXPECT_LE(region->top, box.top);
      EXPECT_LE(region->left, box.left);
      EXPECT_GE(region->top + region->height, box.top + box.height);
      EXPECT_GE(region->left + region->width, box.left + box.width);
      absl::StatusOr<ImageInfo> info = ReadJpegInfo(region->jpeg, DecodeLimits());
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->height, region->height);
      EXPECT_EQ(info->width, region->width);
      EXPECT_FALSE(info->progressive);
      region_bytes += region->jpeg.size();

      const BoxPixels whole = DecodeBox(jpeg, box);
      const CropBox shifted{box.top - region->top, box.left - region->left, box.height,
                            box.width};
      const BoxPixels part = DecodeBox(region->jpeg, shifted);
      ++scales[whole.scale];
      ASSERT_EQ(part.scale, whole.scale);
      EXPECT_EQ(part.x1 - part.x0, whole.x1 - whole.x0);
      EXPECT_EQ(part.y1 - part.y0, whole.y1 - whole.y0);
      EXPECT_EQ(part.x0 - std::floor(part.x0), whole.x0 - std::floor(whole.x0));
      EXPECT_EQ(part.y0 - std::floor(part.y0), whole.y0 - std::floor(whole.y0));
      ASSERT_EQ(part.rgb.size(), whole.rgb.size());
      EXPECT_TRUE(part.rgb == whole.rgb) << "the box's decoded pixels differ";
      EXPECT_TRUE(part.resized == whole.resized) << "the resized crop differs";
    }
    // Every scale was exercised, and the regions are smaller than the file.
    for (int s : {1, 2, 4, 8}) EXPECT_GT(scales[s], 0) << "scale " << s << "/8";
    EXPECT_LT(region_bytes, static_cast<int64_t>(jpeg.size() * boxes.size()));
  }
}

TEST(JpegCropTest, RegionBoundsFollowTheIMcuGridAndTheUpsampler) {
  // A 4:2:0 file: 16 x 16 iMCUs. Without row context the box's iMCUs.
  RegionBounds r = CropRegionBounds({40, 37, 300, 300}, 480, 640, 16, 16, 8, false);
  EXPECT_EQ(r.top, 32);
  EXPECT_EQ(r.left, 32);
  EXPECT_EQ(r.top + r.height, 352);  // 340 rounded up to 16
  EXPECT_EQ(r.left + r.width, 352);
  // With it, still the box's iMCU rows when the box neither starts on an
  // iMCU row's first line nor ends on one's last.
  r = CropRegionBounds({40, 37, 100, 100}, 480, 640, 16, 16, 8, true);
  EXPECT_EQ(r.top, 32);
  EXPECT_EQ(r.left, 32);
  EXPECT_EQ(r.top + r.height, 144);  // 140 -> 144
  EXPECT_EQ(r.left + r.width, 144);
  // Starting on an iMCU row's first line: the row above; ending on one's
  // last line: the row below.
  r = CropRegionBounds({48, 37, 96, 100}, 480, 640, 16, 16, 8, true);
  EXPECT_EQ(r.top, 32);
  EXPECT_EQ(r.top + r.height, 160);  // 144, + 16
  // At scale 4/8 an iMCU row is 8 output lines: box line 50 is output line
  // 25, not the first of its iMCU row (24); 49 is line 24.
  r = CropRegionBounds({50, 37, 96, 100}, 480, 640, 16, 16, 4, true);
  EXPECT_EQ(r.top, 48);
  EXPECT_EQ(r.top + r.height, 160);  // ends at line 73 (ceil(146/2)): 73 % 8 != 0
  r = CropRegionBounds({49, 37, 95, 100}, 480, 640, 16, 16, 4, true);
  EXPECT_EQ(r.top, 32);
  EXPECT_EQ(r.top + r.height, 160);  // ends at line 72: the last of its iMCU row
  // The image's edges clamp.
  r = CropRegionBounds({0, 600, 480, 40}, 480, 640, 8, 8, 8, true);
  EXPECT_EQ(r.top, 0);
  EXPECT_EQ(r.height, 480);
  EXPECT_EQ(r.left, 600);
  EXPECT_EQ(r.width, 40);
}

// Boxes whose first and last lines fall on every position that matters in
// their iMCU rows (the first and last lines, and next to them) and whose
// columns do the same, at every scale: the region takes the iMCU row above
// or below exactly when the upsampler reads it, and never misses one.
TEST(JpegCropTest, BoxEdgesOnTheIMcuGridDecodeAsTheWholeFile) {
  const int kHeight = 477, kWidth = 631;
  const Image8 img = MakeTestImage(kHeight, kWidth, 5);
  const int offsets[] = {0, 1, 14, 15, 31};
  for (const Variant& variant : AllVariants()) {
    SCOPED_TRACE(variant.name);
    const std::string jpeg = EncodeJpeg(img, variant.options);
    for (int min_side : {96, 48, 24, 12}) {  // scales 8/8, 4/8, 2/8, 1/8 for these boxes
      for (int top_off : offsets) {
        for (int end_off : offsets) {
          const CropBox box{64 + top_off, 96 + end_off, 128 + end_off - top_off, 112};
          SCOPED_TRACE(absl::StrCat("min_side ", min_side, " box top ", box.top, " left ",
                                    box.left, " ", box.height, "x", box.width));
          absl::StatusOr<JpegRegion> region = Crop(jpeg, box, DecodeLimits(), min_side);
          ASSERT_TRUE(region.ok()) << region.status();
          const BoxPixels whole = DecodeBox(jpeg, box, min_side);
          const CropBox shifted{box.top - region->top, box.left - region->left, box.height,
                                box.width};
          const BoxPixels part = DecodeBox(region->jpeg, shifted, min_side);
          ASSERT_EQ(part.scale, whole.scale);
          ASSERT_EQ(part.rgb.size(), whole.rgb.size());
          ASSERT_TRUE(part.rgb == whole.rgb) << "the box's decoded pixels differ";
        }
      }
    }
  }
}

// The bytes of `jpeg` from `fraction` of its scan data on replaced by fill
// bytes (0xFF), up to its EOI marker: a decode that reaches them fails.
std::string DamageTail(const std::string& jpeg, double fraction) {
  const size_t sos = jpeg.find("\xff\xda");
  EXPECT_NE(sos, std::string::npos);
  const size_t data = sos + 2 + ((static_cast<uint8_t>(jpeg[sos + 2]) << 8) |
                                 static_cast<uint8_t>(jpeg[sos + 3]));
  const size_t end = jpeg.size() - 2;  // the EOI marker stays
  std::string out = jpeg;
  for (size_t i = data + static_cast<size_t>((end - data) * fraction); i < end; ++i) {
    out[i] = static_cast<char>(0xFF);
  }
  return out;
}

// In a file of one scan the crop stops reading at the region's last iMCU
// row, as the decode of the file stops at the box's: damage below both
// fails neither, and they give the same pixels.
TEST(JpegCropTest, RowsBelowTheRegionAreNotRead) {
  const Image8 img = MakeTestImage(800, 600, 9);
  const CropBox box{40, 100, 120, 200};  // the top sixth of the image
  for (const Variant& variant : AllVariants()) {
    // libjpeg's arithmetic decoder reads past such damage without a warning.
    if (variant.options.arithmetic) continue;
    const bool one_scan = !variant.options.progressive;
    SCOPED_TRACE(variant.name);
    const std::string damaged = DamageTail(EncodeJpeg(img, variant.options), 0.6);
    ASSERT_FALSE(DecodeJpeg(damaged, DecodeLimits()).ok()) << "the damage is not seen";
    absl::StatusOr<JpegRegion> region = Crop(damaged, box);
    if (!one_scan) {  // every scan is read to the end
      EXPECT_FALSE(region.ok());
      continue;
    }
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_LT(region->top + region->height, 300);
    const BoxPixels whole = DecodeBox(damaged, box);
    const CropBox shifted{box.top - region->top, box.left - region->left, box.height,
                          box.width};
    const BoxPixels part = DecodeBox(region->jpeg, shifted);
    ASSERT_EQ(part.rgb.size(), whole.rgb.size());
    EXPECT_TRUE(part.rgb == whole.rgb);
  }
}

// A plane sampled between full and lowest resolution (here luma, 2x2 of a
// 2x4 grid) is upsampled in a way the region does not reproduce: such a
// file is sent whole (the fuzzer found one).
TEST(JpegCropTest, IntermediateSamplingIsNotCropped) {
  const Image8 img = MakeTestImage(200, 240, 4);
  const std::string jpeg = EncodeJpeg(img, {.sampling = Sampling::kLumaSubsampled});
  ASSERT_TRUE(DecodeJpeg(jpeg, DecodeLimits()).ok());
  absl::StatusOr<JpegRegion> region = Crop(jpeg, {20, 30, 100, 100});
  ASSERT_EQ(region.status().code(), absl::StatusCode::kUnimplemented) << region.status();
  EXPECT_NE(region.status().message().find("component 0 sampled 2x2 of 2x4"), std::string::npos)
      << region.status();
}

TEST(JpegCropTest, UnrefinedProgressiveFileIsNotCropped) {
  const Image8 img = MakeTestImage(120, 160, 2);
  const std::string jpeg = EncodeJpeg(img, {.unrefined_progression = true});
  ASSERT_TRUE(DecodeJpeg(jpeg, DecodeLimits()).ok());  // a valid file
  absl::StatusOr<JpegRegion> region = Crop(jpeg, {10, 10, 50, 50});
  ASSERT_EQ(region.status().code(), absl::StatusCode::kUnimplemented) << region.status();
  EXPECT_NE(region.status().message().find("unrefined"), std::string::npos) << region.status();
}

TEST(JpegCropTest, BadFilesFailAsTheirDecodeDoes) {
  const Image8 img = MakeTestImage(120, 160, 2);
  const std::string jpeg = EncodeJpeg(img);
  const CropBox box{10, 10, 50, 50};
  EXPECT_EQ(Crop("", box).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Crop("not a jpeg at all", box).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Crop(jpeg.substr(0, jpeg.size() / 2), box).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Corrupt scan data under the box: strict decoding refuses it. A lenient
  // decode accepts it, filling in for the missing data in a way that depends
  // on what it reads: the crop declines (the file is sent whole and decoded
  // as in every other mode).
  const std::string cut = testing::TruncateScanKeepEoi(jpeg);
  const CropBox low{60, 10, 60, 50};
  EXPECT_EQ(Crop(cut, low).status().code(), absl::StatusCode::kDataLoss);
  DecodeLimits lenient;
  lenient.lenient = true;
  EXPECT_TRUE(DecodeJpegRegion(cut, low, kMinSide, lenient).ok());
  absl::StatusOr<JpegRegion> declined = Crop(cut, low, lenient);
  EXPECT_EQ(declined.status().code(), absl::StatusCode::kUnimplemented) << declined.status();
  // A box outside the image.
  EXPECT_EQ(Crop(jpeg, {100, 100, 50, 50}).status().code(), absl::StatusCode::kInvalidArgument);
  // A header that claims more pixels than allowed.
  DecodeLimits small;
  small.max_pixels = 1000;
  EXPECT_EQ(Crop(jpeg, box, small).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JpegCropTest, MemoryAndScanCapsAreCheckedBeforeTheWork) {
  // 4000 x 4000 claimed by a 155-byte-class header: the coefficients would
  // need about 48 MB; the cap refuses it before anything is allocated.
  const Image8 img = MakeTestImage(64, 64, 2);
  const std::string claims = testing::PatchDimensions(EncodeJpeg(img), 4000, 4000);
  DecodeLimits limits;
  limits.max_memory_bytes = 16 << 20;
  absl::StatusOr<JpegRegion> region = Crop(claims, {0, 0, 64, 64}, limits);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kResourceExhausted) << region.status();
  EXPECT_NE(region.status().message().find("max_memory_bytes"), std::string::npos);
  // A file of 380 scans against a cap of 50.
  const std::string many = EncodeJpeg(img, {.scan_per_coefficient = true});
  DecodeLimits scans;
  scans.max_scans = 50;
  region = Crop(many, {0, 0, 64, 64}, scans);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kResourceExhausted) << region.status();
  EXPECT_NE(region.status().message().find("max_scans"), std::string::npos);
}

// Found by fuzz/crop_fuzzer.cc (a 4:2:2 file, a 6 x 6 box decoded at 2/8):
// libjpeg filters a horizontally subsampled component ("fancy" h2v1 and h2v2
// upsampling) only where it is more than 2 samples wide at the decode's
// scale, and judges that on the file's width before jpeg_crop_scanline
// narrows it. A region whose chroma is 2 samples wide there was upsampled by
// replication where the whole file is filtered.
TEST(JpegCropTest, NarrowRegionIsUpsampledAsTheWholeFile) {
  struct Case {
    const char* name;
    Sampling sampling;
    int width;
    CropBox box;
    int min_side;
  };
  const Case cases[] = {
      // Full scale: the last iMCU column 4 or 3 pixels wide (2 chroma samples).
      {"420 last column 4 wide", Sampling::k420, 36, {8, 32, 8, 4}, kMinSide},
      {"420 last column 3 wide", Sampling::k420, 35, {20, 33, 5, 2}, kMinSide},
      {"422 last column 4 wide", Sampling::k422, 52, {3, 48, 30, 4}, kMinSide},
      // 2/8: every iMCU column is 4 pixels (2 chroma samples) wide.
      {"422 one column at 2/8", Sampling::k422, 64, {10, 20, 6, 12}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string jpeg = EncodeJpeg(MakeTestImage(40, c.width, 5), {.sampling = c.sampling});
    absl::StatusOr<JpegRegion> region = Crop(jpeg, c.box, DecodeLimits(), c.min_side);
    ASSERT_TRUE(region.ok()) << region.status();
    const CropBox shifted{c.box.top - region->top, c.box.left - region->left, c.box.height,
                          c.box.width};
    const BoxPixels whole = DecodeBox(jpeg, c.box, c.min_side);
    const BoxPixels part = DecodeBox(region->jpeg, shifted, c.min_side);
    ASSERT_EQ(part.scale, whole.scale);
    ASSERT_EQ(part.rgb.size(), whole.rgb.size());
    EXPECT_TRUE(part.rgb == whole.rgb) << "the box's decoded pixels differ (region left "
                                       << region->left << ", " << region->width << " wide)";
  }
}

// A gray 8 x 16 baseline JPEG of two blocks, written from DCT coefficients:
// DC `dc0` and `dc1`, every AC 0, a quantization table of 1s. Each DC is
// coded as the difference from the one before, which fits in the 11 bits of
// the standard tables for any |dc1 - dc0| < 2048 although a DC of an 8-bit
// sample is at most 1024 in magnitude: no encoder of pixels writes such a
// file, libjpeg decodes it without a warning.
std::string TwoBlockGrayJpeg(int dc0, int dc1) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = 16;
  cinfo.image_height = 8;
  cinfo.input_components = 1;
  cinfo.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 100, TRUE);
  jvirt_barray_ptr arrays[1] = {(*cinfo.mem->request_virt_barray)(
      reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE, TRUE, 2, 1, 1)};
  jpeg_write_coefficients(&cinfo, arrays);
  JBLOCKARRAY row = (*cinfo.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&cinfo),
                                                      arrays[0], 0, 1, TRUE);
  row[0][0][0] = static_cast<JCOEF>(dc0);
  row[0][1][0] = static_cast<JCOEF>(dc1);
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  return out;
}

// Bytes the heap holds (glibc; 0 under a sanitizer's allocator, whose leak
// checker then finds what this counts).
int64_t HeapBytesInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// Found by fuzz/crop_fuzzer.cc (a leak report): an error from libjpeg while
// the region is encoded (here its first block's DC, coded from 0, needs 12
// bits, more than a baseline Huffman table codes) jumped back to a handler
// that did not see that the encoder existed, so the encoder's memory leaked
// with every such file.
TEST(JpegCropTest, ErrorWhileEncodingTheRegionFreesTheEncoder) {
  const std::string jpeg = TwoBlockGrayJpeg(2000, 4000);
  ASSERT_TRUE(DecodeJpeg(jpeg, DecodeLimits()).ok());
  const CropBox second_block{0, 8, 8, 8};
  // The file decodes, so the region's error is a refusal to crop (the file
  // is sent whole), not a failed sample.
  absl::StatusOr<JpegRegion> region = Crop(jpeg, second_block);
  ASSERT_EQ(region.status().code(), absl::StatusCode::kUnimplemented) << region.status();
  EXPECT_NE(region.status().message().find("DCT coefficient out of range"), std::string::npos)
      << region.status();
  // The first block alone is a region that can be written.
  EXPECT_TRUE(Crop(jpeg, {0, 0, 8, 8}).ok());

  const int64_t before = HeapBytesInUse();
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(Crop(jpeg, second_block).status().code(), absl::StatusCode::kUnimplemented);
  }
  // About 20 KB a crop when the encoder leaked.
  EXPECT_LT(HeapBytesInUse() - before, 200 << 10);
}

}  // namespace
}  // namespace sophon
