#include "sophon/image/jpeg_codec.h"

#include <cmath>
#include <cstdint>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else  // no valgrind headers: nothing runs under memcheck
#define VALGRIND_CHECK_MEM_IS_DEFINED(addr, len) 0
#endif

#include "gtest/gtest.h"
#include "sophon/ops/augment.h"
#include "sophon/image/image_ops.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::JpegColor;
using testing::MakeTestImage;
using testing::Sampling;

// Mean absolute error per channel between two RGB images of one size.
std::array<double, 3> MeanAbsError(const Image8& a, const Image8& b) {
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.width, b.width);
  std::array<double, 3> err{};
  const size_t n = static_cast<size_t>(a.height) * a.width;
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) err[c] += std::abs(a.pixels[3 * i + c] - b.pixels[3 * i + c]);
  }
  for (double& e : err) e /= n;
  return err;
}

// The exact reference: every output pixel is the mean of the full-resolution
// pixels it covers, computed in double with explicit overlap areas.
Image8 ExactAreaResize(const Image8& src, const CropBox& box, int s) {
  Image8 out;
  out.height = out.width = s;
  out.pixels.resize(static_cast<size_t>(s) * s * 3);
  const double sy = static_cast<double>(box.height) / s, sx = static_cast<double>(box.width) / s;
  for (int oy = 0; oy < s; ++oy) {
    const double y0 = box.top + oy * sy, y1 = y0 + sy;
    for (int ox = 0; ox < s; ++ox) {
      const double x0 = box.left + ox * sx, x1 = x0 + sx;
      double acc[3] = {0, 0, 0}, total = 0;
      for (int y = static_cast<int>(std::floor(y0)); y < std::ceil(y1); ++y) {
        const double wy = std::min(y1, y + 1.0) - std::max(y0, static_cast<double>(y));
        for (int x = static_cast<int>(std::floor(x0)); x < std::ceil(x1); ++x) {
          const double w = wy * (std::min(x1, x + 1.0) - std::max(x0, static_cast<double>(x)));
          if (w <= 0) continue;
          const uint8_t* p = src.pixels.data() + (static_cast<size_t>(y) * src.width + x) * 3;
          for (int c = 0; c < 3; ++c) acc[c] += w * p[c];
          total += w;
        }
      }
      for (int c = 0; c < 3; ++c) {
        out.pixels[(static_cast<size_t>(oy) * s + ox) * 3 + c] =
            static_cast<uint8_t>(std::lround(acc[c] / total));
      }
    }
  }
  return out;
}

Image8 FastCropResize(const std::string& jpeg, const CropBox& box, int s) {
  absl::StatusOr<DecodedRegion> region = DecodeJpegRegion(jpeg, box, s, DecodeLimits());
  EXPECT_TRUE(region.ok()) << region.status();
  Image8 out;
  out.height = out.width = s;
  out.pixels.resize(static_cast<size_t>(s) * s * 3);
  EXPECT_EQ(region->image.channels, 4);
  ResizeAreaRgb(region->image.pixels.data(), region->image.height, region->image.width,
                region->image.width * 4, 4, region->x0, region->y0, region->x1, region->y1, s, s,
                out.pixels.data());
  return out;
}

TEST(JpegCodecTest, DecodesRgb) {
  const Image8 img = MakeTestImage(120, 160, 1);
  absl::StatusOr<Image8> decoded = DecodeJpeg(EncodeJpeg(img, {.quality = 95}), DecodeLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  for (double e : MeanAbsError(img, *decoded)) EXPECT_LT(e, 4.0);
}

TEST(JpegCodecTest, DecodesGrayscaleToRgb) {
  const Image8 img = MakeTestImage(64, 96, 2);
  EncodeOptions opts;
  opts.color = JpegColor::kGray;
  absl::StatusOr<Image8> decoded = DecodeJpeg(EncodeJpeg(img, opts), DecodeLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->width, 96);
  for (size_t i = 0; i < decoded->pixels.size(); i += 3) {
    ASSERT_EQ(decoded->pixels[i], decoded->pixels[i + 1]);
    ASSERT_EQ(decoded->pixels[i], decoded->pixels[i + 2]);
  }
}

TEST(JpegCodecTest, DecodesAdobeCmykToRgb) {
  const Image8 img = MakeTestImage(80, 80, 3);
  EncodeOptions opts;
  opts.color = JpegColor::kCmyk;
  opts.quality = 95;
  const std::string jpeg = EncodeJpeg(img, opts);
  absl::StatusOr<ImageInfo> info = ReadJpegInfo(jpeg, DecodeLimits());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->components, 4);
  absl::StatusOr<Image8> decoded = DecodeJpeg(jpeg, DecodeLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  for (double e : MeanAbsError(img, *decoded)) EXPECT_LT(e, 6.0);
}

TEST(JpegCodecTest, DecodesProgressiveAndRestartMarkers) {
  const Image8 img = MakeTestImage(200, 300, 4);
  EncodeOptions progressive;
  progressive.progressive = true;
  progressive.quality = 95;
  EncodeOptions restarts;
  restarts.restart_interval = 1;
  restarts.quality = 95;
  for (const EncodeOptions& opts : {progressive, restarts}) {
    const std::string jpeg = EncodeJpeg(img, opts);
    absl::StatusOr<Image8> decoded = DecodeJpeg(jpeg, DecodeLimits());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    for (double e : MeanAbsError(img, *decoded)) EXPECT_LT(e, 4.0);
    // The region path works on them too.
    const Image8 fast = FastCropResize(jpeg, CropBox{20, 30, 150, 200}, 64);
    decoded = DecodeJpeg(jpeg, DecodeLimits());
    const Image8 exact = ExactAreaResize(*decoded, CropBox{20, 30, 150, 200}, 64);
    for (double e : MeanAbsError(exact, fast)) EXPECT_LT(e, 3.0);
  }
  absl::StatusOr<ImageInfo> info = ReadJpegInfo(EncodeJpeg(img, progressive), DecodeLimits());
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->progressive);
}

// Stated tolerance of the fast path (scaled DCT decode of just the crop's
// rows and iMCU columns, then area resize) against the exact reference (full
// decode, exact area average): mean absolute error per channel < 3 of 255.
TEST(JpegCodecTest, ScaledRegionDecodeMatchesExactReference) {
  const Image8 img = MakeTestImage(768, 1024, 5);
  const std::string jpeg = EncodeJpeg(img, {.quality = 90});
  absl::StatusOr<Image8> full = DecodeJpeg(jpeg, DecodeLimits());
  ASSERT_TRUE(full.ok());
  AugmentOptions opts;
  int reduced = 0;
  for (uint64_t id = 0; id < 24; ++id) {
    const CropBox box = AugmentFor({9, 0, id}, 768, 1024, opts).box;
    absl::StatusOr<DecodedRegion> region = DecodeJpegRegion(jpeg, box, 224, DecodeLimits());
    ASSERT_TRUE(region.ok()) << region.status();
    reduced += region->scale_num < 8;
    // Only the power-of-two scales, whose inverse DCTs are SIMD.
    EXPECT_EQ(region->scale_num & (region->scale_num - 1), 0) << "id " << id;
    // The chosen scale keeps the crop at least S pixels on each side.
    if (region->scale_num < 8) {
      EXPECT_GE(box.width * region->scale_num, 224 * 8) << "id " << id;
      EXPECT_GE(box.height * region->scale_num, 224 * 8) << "id " << id;
    }
    const Image8 fast = FastCropResize(jpeg, box, 224);
    const Image8 exact = ExactAreaResize(*full, box, 224);
    for (double e : MeanAbsError(exact, fast)) EXPECT_LT(e, 3.0) << "id " << id;
  }
  EXPECT_GT(reduced, 12);  // most crops of a 1024x768 image decode at < 1/1
}

// The region path keeps only the crop's MCU columns: the entropy decoder does
// not store the coefficients of the others (DecodeMcuInCrop). Crops at the
// left edge, the right edge and inside, of every colour model, with and
// without restart markers, still match the exact reference.
TEST(JpegCodecTest, RegionDecodeOfEveryColourModelMatchesExactReference) {
  const Image8 img = MakeTestImage(400, 600, 8);
  const CropBox boxes[] = {{0, 0, 300, 250}, {50, 350, 300, 250}, {37, 201, 250, 233},
                           {100, 0, 280, 600}};
  for (JpegColor color : {JpegColor::kRgb, JpegColor::kGray, JpegColor::kCmyk}) {
    for (int restart : {0, 2}) {
      EncodeOptions opts;
      opts.color = color;
      opts.restart_interval = restart;
      opts.quality = 92;
      const std::string jpeg = EncodeJpeg(img, opts);
      absl::StatusOr<Image8> full = DecodeJpeg(jpeg, DecodeLimits());
      ASSERT_TRUE(full.ok()) << full.status();
      for (const CropBox& box : boxes) {
        for (int s : {224, 96}) {  // full scale and reduced scales
          const Image8 fast = FastCropResize(jpeg, box, s);
          const Image8 exact = ExactAreaResize(*full, box, s);
          for (double e : MeanAbsError(exact, fast)) {
            EXPECT_LT(e, 3.0) << "colour " << static_cast<int>(color) << " restart " << restart
                              << " box left " << box.left << " S " << s;
          }
        }
      }
    }
  }
}

TEST(JpegCodecTest, SmallCropIsUpscaledFromFullResolution) {
  const Image8 img = MakeTestImage(300, 300, 6);
  const std::string jpeg = EncodeJpeg(img, {.quality = 95});
  absl::StatusOr<DecodedRegion> region =
      DecodeJpegRegion(jpeg, CropBox{100, 100, 50, 60}, 224, DecodeLimits());
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(region->scale_num, 8);
  EXPECT_NEAR(region->x1 - region->x0, 60, 1e-9);
  EXPECT_NEAR(region->y1 - region->y0, 50, 1e-9);
}

// Offset of the first byte of `image` that memcheck sees as undefined (and
// reports), or -1; always -1 when not run under memcheck (ctest runs this test
// under it as memcheck_jpeg_codec_test, tools/memcheck.sh).
int64_t FirstUndefinedByte(const Image8& image) {
  const size_t n = static_cast<size_t>(image.height) * image.width * image.channels;
  const uintptr_t start = reinterpret_cast<uintptr_t>(image.pixels.data());
  const uintptr_t bad = VALGRIND_CHECK_MEM_IS_DEFINED(image.pixels.data(), n);
  return bad == 0 ? -1 : static_cast<int64_t>(bad - start);
}

// libjpeg-turbo's AVX2 kernels compute on the padding past a decode's last
// column, and memcheck spreads those bytes to the pixel packed beside them: the
// last column of a 4:2:0 or 4:2:2 image or region whose width is 14 mod 16, the
// last two of a 4:4:0 one. The decoder zeroes libjpeg's sample rows
// (DefineSampleRows, jpeg_guard.cc), so every byte it hands out is defined:
// whole images, whole-width regions at 1/1 and 1/8, and cropped regions. The
// whole-width region has the whole decode's pixels.
TEST(JpegCodecTest, EveryByteIsDefinedAtEdgeWidthsThatSimdOverruns) {
  for (Sampling sampling : {Sampling::k420, Sampling::k422, Sampling::k440}) {
    for (int width : {302, 350, 654}) {
      SCOPED_TRACE(::testing::Message() << "sampling " << static_cast<int>(sampling) << " width "
                                      << width);
      EncodeOptions opts;
      opts.sampling = sampling;
      const std::string jpeg = EncodeJpeg(MakeTestImage(40, width, width), opts);
      absl::StatusOr<Image8> full = DecodeJpeg(jpeg, DecodeLimits());
      ASSERT_TRUE(full.ok()) << full.status();
      EXPECT_EQ(FirstUndefinedByte(*full), -1);
      // 16 px in from each side: a crop whose width is still 14 mod 16.
      for (const CropBox& box : {CropBox{0, 0, 40, width}, CropBox{0, 16, 40, width - 32}}) {
        for (int min_side : {224, 1}) {  // 1/1, then 1/8
          absl::StatusOr<DecodedRegion> region = DecodeJpegRegion(jpeg, box, min_side,
                                                                  DecodeLimits());
          ASSERT_TRUE(region.ok()) << region.status();
          EXPECT_EQ(region->scale_num, min_side == 1 ? 1 : 8);
          EXPECT_EQ(FirstUndefinedByte(region->image), -1)
              << "box left " << box.left << ", scale " << region->scale_num << "/8";
        }
      }
      absl::StatusOr<DecodedRegion> whole =
          DecodeJpegRegion(jpeg, CropBox{0, 0, 40, width}, 224, DecodeLimits());
      ASSERT_TRUE(whole.ok()) << whole.status();
      ASSERT_EQ(whole->image.width, width);
      ASSERT_EQ(whole->image.height, 40);
      for (size_t i = 0; i < static_cast<size_t>(40) * width; ++i) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(whole->image.pixels[4 * i + c], full->pixels[3 * i + c]) << "pixel " << i;
        }
      }
    }
  }
}

TEST(JpegCodecTest, RejectsBadInputWithClearErrors) {
  const std::string good = EncodeJpeg(MakeTestImage(64, 64, 7));
  auto decode = [](const std::string& bytes) { return DecodeJpeg(bytes, DecodeLimits()).status(); };
  EXPECT_NE(decode("").message().find("empty"), std::string::npos);
  EXPECT_NE(decode("GIF89a not a jpeg").message().find("not a JPEG"), std::string::npos);
  EXPECT_NE(decode(good.substr(0, good.size() / 2)).message().find("truncated"),
            std::string::npos);
  std::string garbage = good.substr(0, 200);
  for (int i = 0; i < 3000; ++i) garbage.push_back(static_cast<char>((i * 7919) & 0xff));
  garbage += "\xff\xd9";
  EXPECT_EQ(decode("").code(), absl::StatusCode::kInvalidArgument);
  // Garbage scan data is corrupt data: a strict decode stops at libjpeg's
  // first warning; a lenient one goes on until libjpeg gives up.
  EXPECT_EQ(decode(garbage).code(), absl::StatusCode::kDataLoss);
  DecodeLimits lenient;
  lenient.lenient = true;
  EXPECT_EQ(DecodeJpeg(garbage, lenient).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeLimitsTest, ValidateNamesTheLimit) {
  EXPECT_TRUE(DecodeLimits().Validate().ok());
  DecodeLimits limits;
  limits.max_scans = 0;
  EXPECT_NE(limits.Validate().message().find("DecodeLimits.max_scans"), std::string::npos);
  limits = DecodeLimits();
  limits.max_memory_bytes = 1000;
  EXPECT_NE(limits.Validate().message().find("DecodeLimits.max_memory_bytes"), std::string::npos);
  limits = DecodeLimits();
  limits.max_scan_samples = 0;
  EXPECT_NE(limits.Validate().message().find("DecodeLimits.max_scan_samples"), std::string::npos);
  limits = DecodeLimits();
  limits.max_pixels = 0;
  EXPECT_NE(limits.Validate().message().find("DecodeLimits.max_pixels"), std::string::npos);
}

// Class 5: scan data cut short and followed by EOI decodes to grey padding
// with only a warning from libjpeg. Strict decoding (the default) fails it,
// on every decode path; lenient decoding accepts it as before.
TEST(JpegCodecTest, TruncatedScanFailsStrictAndPassesLenient) {
  const Image8 img = MakeTestImage(256, 256, 21);
  for (bool progressive : {false, true}) {
    const std::string cut =
        testing::TruncateScanKeepEoi(EncodeJpeg(img, {.progressive = progressive}));
    absl::Status full = DecodeJpeg(cut, DecodeLimits()).status();
    EXPECT_EQ(full.code(), absl::StatusCode::kDataLoss) << full;
    EXPECT_NE(full.message().find("premature end of data segment"), std::string::npos) << full;
    EXPECT_NE(full.message().find("DecodeLimits.lenient"), std::string::npos) << full;
    absl::Status region =
        DecodeJpegRegion(cut, CropBox{128, 0, 128, 256}, 224, DecodeLimits()).status();
    EXPECT_EQ(region.code(), absl::StatusCode::kDataLoss) << region;

    DecodeLimits lenient;
    lenient.lenient = true;
    EXPECT_TRUE(DecodeJpeg(cut, lenient).ok());
    EXPECT_TRUE(DecodeJpegRegion(cut, CropBox{128, 0, 128, 256}, 224, lenient).ok());
  }
}

// Class 4: a 155-byte-class progressive file whose header claims 10000 x
// 10000 (libjpeg would allocate its ~600 MB of coefficients before reading
// a scan) fails on the memory limit before any of it is allocated.
TEST(JpegCodecTest, ProgressiveHeaderClaimingHugeDimensionsHitsTheMemoryLimit) {
  const std::string jpeg = testing::PatchDimensions(
      EncodeJpeg(MakeTestImage(16, 16, 22), {.quality = 50, .progressive = true}), 10000, 10000);
  ASSERT_LT(jpeg.size(), 2000u);
  absl::StatusOr<ImageInfo> info = ReadJpegInfo(jpeg, DecodeLimits());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 10000);
  EXPECT_TRUE(info->progressive);
  for (const absl::Status& status :
       {DecodeJpeg(jpeg, DecodeLimits()).status(),
        DecodeJpegRegion(jpeg, CropBox{0, 0, 224, 224}, 224, DecodeLimits()).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_NE(status.message().find("DecodeLimits.max_memory_bytes (268435456)"),
              std::string::npos)
        << status;
    EXPECT_NE(status.message().find("10000x10000"), std::string::npos) << status;
  }
  // The limit is what decides: a smaller image within it decodes, one over
  // a lowered limit does not.
  const std::string small = EncodeJpeg(MakeTestImage(512, 512, 23), {.progressive = true});
  DecodeLimits tight;
  tight.max_memory_bytes = 1 << 20;  // 512x512 4:2:0 needs 768 KiB of coefficients
  EXPECT_TRUE(DecodeJpeg(small, tight).ok());
  const std::string larger = EncodeJpeg(MakeTestImage(1024, 1024, 24), {.progressive = true});
  EXPECT_EQ(DecodeJpeg(larger, tight).status().code(), absl::StatusCode::kResourceExhausted);
}

// Class 4: a valid progressive file of 380 scans (one per coefficient and
// bit) fails on the scan cap before its scans are decoded; a higher cap
// decodes it.
TEST(JpegCodecTest, ManyScansHitTheScanCap) {
  const Image8 img = MakeTestImage(64, 64, 25);
  const std::string jpeg = EncodeJpeg(img, {.scan_per_coefficient = true});
  absl::Status status = DecodeJpeg(jpeg, DecodeLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("DecodeLimits.max_scans (256)"), std::string::npos) << status;
  status = DecodeJpegRegion(jpeg, CropBox{0, 0, 32, 32}, 16, DecodeLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  DecodeLimits more;
  more.max_scans = 380;
  absl::StatusOr<Image8> decoded = DecodeJpeg(jpeg, more);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->width, 64);
  more.max_scans = 379;
  EXPECT_EQ(DecodeJpeg(jpeg, more).status().code(), absl::StatusCode::kResourceExhausted);
}

// Class 4: the work of the scans together is capped too, so that scans few
// enough for max_scans over a large image cannot take seconds. A 64x64 gray
// image of 128 scans decodes 128 * 4096 samples in all.
TEST(JpegCodecTest, ScanWorkIsCapped) {
  const std::string jpeg = EncodeJpeg(MakeTestImage(64, 64, 26),
                                      {.color = JpegColor::kGray, .scan_per_coefficient = true});
  DecodeLimits limits;
  limits.max_scan_samples = 128 * 4096;
  EXPECT_TRUE(DecodeJpeg(jpeg, limits).ok());
  limits.max_scan_samples = 128 * 4096 - 1;
  absl::Status status = DecodeJpeg(jpeg, limits).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("DecodeLimits.max_scan_samples (524287)"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("first 128 scans"), std::string::npos) << status;
  // A baseline image counts its one scan: 1.5 samples per pixel in 4:2:0.
  const std::string baseline = EncodeJpeg(MakeTestImage(64, 64, 27));
  limits.max_scan_samples = 64 * 64 * 3 / 2;
  EXPECT_TRUE(DecodeJpeg(baseline, limits).ok());
  limits.max_scan_samples -= 1;
  EXPECT_EQ(DecodeJpeg(baseline, limits).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JpegCodecTest, RejectsAbsurdDimensionsBeforeAllocating) {
  std::string jpeg = EncodeJpeg(MakeTestImage(16, 16, 8));
  // Patch the SOF0 frame header: FF C0, length(2), precision(1), height(2), width(2).
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = static_cast<char>(0xfd);
  jpeg[sof + 6] = jpeg[sof + 8] = static_cast<char>(0xe8);  // 65000 x 65000
  absl::Status status = DecodeJpeg(jpeg, DecodeLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("65000x65000"), std::string::npos) << status;
}

}  // namespace
}  // namespace sophon
