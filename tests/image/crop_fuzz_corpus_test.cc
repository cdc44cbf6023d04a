// The seed corpus of the lossless-crop fuzzer (fuzz/corpus/crop): valid files
// of each colour model, sampling layout and coding, sizes with partial iMCUs
// on the right and at the bottom, a progression the crop refuses, and hostile
// files. Each seed's name starts with the status that a strict crop with the
// default DecodeLimits gives it (kCropBox below: the middle half of the
// image); the test checks that for the seeds it makes and for the checked-in
// ones. To remake the checked-in corpus:
//   SOPHON_FUZZ_CORPUS_OUT=fuzz/corpus/crop build/crop_fuzz_corpus_test
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/image/jpeg_crop.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::JpegColor;
using testing::MakeTestImage;
using testing::Sampling;

struct Seed {
  std::string name;  // "<status>-<what>.jpg"
  std::string bytes;
};

// The frame header's sampling factors of component `c` set to h x v (the scan
// data no longer fits them: only for files refused before it is read).
std::string PatchSampling(const std::string& jpeg, int c, int h, int v) {
  std::string out = jpeg;
  const size_t sof = out.find("\xff\xc0");
  if (sof == std::string::npos) return out;
  // FF C0, length(2), precision(1), height(2), width(2), components(1), then
  // per component: id(1), h << 4 | v (1), table(1).
  out[sof + 10 + 3 * c + 1] = static_cast<char>(h << 4 | v);
  return out;
}

// The frame header's sample precision set to `bits`.
std::string PatchPrecision(const std::string& jpeg, int bits) {
  std::string out = jpeg;
  const size_t sof = out.find("\xff\xc0");
  if (sof != std::string::npos) out[sof + 4] = static_cast<char>(bits);
  return out;
}

std::vector<Seed> MakeSeeds() {
  // 45 x 61: partial iMCUs on the right and at the bottom for every layout.
  const Image8 img = MakeTestImage(45, 61, 41);
  const Image8 big = MakeTestImage(96, 96, 42);
  const Image8 small = MakeTestImage(16, 16, 43);
  std::vector<Seed> seeds;
  auto add = [&](std::string name, std::string bytes) {
    seeds.push_back({std::move(name), std::move(bytes)});
  };
  for (const auto& [name, sampling] : testing::ChromaSamplings()) {
    add(absl::StrCat("ok-baseline-", name, ".jpg"),
        EncodeJpeg(img, {.quality = 75, .sampling = sampling}));
    add(absl::StrCat("ok-progressive-", name, ".jpg"),
        EncodeJpeg(img, {.quality = 75, .progressive = true, .sampling = sampling}));
  }
  // Narrow and short images: the last iMCU column or row a few pixels wide
  // (a region of a last column 3 or 4 pixels wide has 2 chroma samples).
  add("ok-baseline-420-21x20.jpg", EncodeJpeg(MakeTestImage(21, 20, 44), {.quality = 75}));
  add("ok-baseline-422-13x35.jpg",
      EncodeJpeg(MakeTestImage(13, 35, 47), {.quality = 75, .sampling = Sampling::k422}));
  add("ok-baseline-411-9x37.jpg",
      EncodeJpeg(MakeTestImage(9, 37, 45), {.quality = 75, .sampling = Sampling::k411}));
  add("ok-baseline-440-19x3.jpg",
      EncodeJpeg(MakeTestImage(19, 3, 46), {.quality = 75, .sampling = Sampling::k440}));
  add("ok-restart-markers.jpg", EncodeJpeg(img, {.quality = 75, .restart_interval = 1}));
  add("ok-progressive-restart-markers.jpg",
      EncodeJpeg(img, {.quality = 75, .progressive = true, .restart_interval = 2}));
  add("ok-gray.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kGray}));
  add("ok-gray-progressive.jpg",
      EncodeJpeg(img, {.quality = 75, .progressive = true, .color = JpegColor::kGray}));
  add("ok-ycck.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kCmyk}));
  add("ok-ycck-progressive.jpg",
      EncodeJpeg(img, {.quality = 75, .progressive = true, .color = JpegColor::kCmyk}));
  add("ok-cmyk-adobe.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kPlainCmyk,
                                            .sampling = Sampling::k444}));
  add("ok-cmyk-no-adobe.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kCmykNoAdobe,
                                               .sampling = Sampling::k444}));
  add("ok-rgb-stored.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kRgbStored}));
  add("ok-arithmetic.jpg", EncodeJpeg(img, {.quality = 75, .arithmetic = true}));
  add("ok-arithmetic-progressive-422.jpg",
      EncodeJpeg(img, {.quality = 75, .progressive = true, .sampling = Sampling::k422,
                       .arithmetic = true}));
  add("ok-scan-per-coefficient-gray.jpg",
      EncodeJpeg(small, {.quality = 75, .color = JpegColor::kGray, .scan_per_coefficient = true}));
  // Valid files the crop refuses (served whole).
  add("unimplemented-unrefined-progression.jpg",
      EncodeJpeg(img, {.quality = 75, .unrefined_progression = true}));
  // Luma 2x2 of a 2x4 grid (Cb 1x4): a plane between full and lowest
  // resolution.
  add("unimplemented-luma-subsampled.jpg",
      EncodeJpeg(img, {.quality = 75, .sampling = Sampling::kLumaSubsampled}));
  add("ok-mixed-sampling.jpg", EncodeJpeg(img, {.quality = 75, .sampling = Sampling::kMixed}));
  // Luma 3x1, Cb 2x1: libjpeg upsamples only by whole factors.
  add("unimplemented-sampling-3x1-2x1.jpg",
      PatchSampling(
          PatchSampling(EncodeJpeg(small, {.quality = 50, .sampling = Sampling::k422}), 0, 3, 1),
          1, 2, 1));
  // Hostile files.
  add("dataloss-truncated-scan.jpg", testing::TruncateScanKeepEoi(EncodeJpeg(big, {.quality = 75})));
  add("dataloss-truncated-progressive.jpg",
      testing::TruncateScanKeepEoi(EncodeJpeg(big, {.quality = 75, .progressive = true})));
  {
    const std::string whole = EncodeJpeg(small, {.quality = 50});
    add("invalid-cut-in-half.jpg", whole.substr(0, whole.size() / 2));
  }
  add("invalid-12-bit.jpg", PatchPrecision(EncodeJpeg(small, {.quality = 50}), 12));
  // The whole image's coefficients are held by any crop, baseline included.
  add("exhausted-baseline-10000x10000.jpg",
      testing::PatchDimensions(EncodeJpeg(small, {.quality = 50}), 10000, 10000));
  add("exhausted-progressive-10000x10000.jpg",
      testing::PatchDimensions(EncodeJpeg(small, {.quality = 50, .progressive = true}), 10000,
                               10000));
  add("exhausted-380-scans.jpg",
      EncodeJpeg(small, {.quality = 50, .scan_per_coefficient = true}));
  add("invalid-65000x65000.jpg",
      testing::PatchDimensions(EncodeJpeg(small, {.quality = 50}), 65000, 65000));
  return seeds;
}

absl::StatusCode ExpectedCode(const std::string& name) {
  const std::string status = name.substr(0, name.find('-'));
  if (status == "ok") return absl::StatusCode::kOk;
  if (status == "unimplemented") return absl::StatusCode::kUnimplemented;
  if (status == "dataloss") return absl::StatusCode::kDataLoss;
  if (status == "exhausted") return absl::StatusCode::kResourceExhausted;
  return absl::StatusCode::kInvalidArgument;
}

// The crop a seed's name states: the middle half of the image, strict
// decoding, default limits. A region must match its header.
void ExpectCropAsNamed(const std::string& name, const std::string& bytes) {
  absl::StatusOr<JpegRegion> region = CropJpegLossless(
      bytes, 8, DecodeLimits(), [](const ImageInfo& info) -> absl::StatusOr<CropBox> {
        return CropBox{info.height / 4, info.width / 4, std::max(1, info.height / 2),
                       std::max(1, info.width / 2)};
      });
  EXPECT_EQ(region.status().code(), ExpectedCode(name)) << name << ": " << region.status();
  if (!region.ok()) return;
  absl::StatusOr<ImageInfo> info = ReadJpegInfo(region->jpeg, DecodeLimits());
  ASSERT_TRUE(info.ok()) << name << ": " << info.status();
  EXPECT_EQ(info->height, region->height) << name;
  EXPECT_EQ(info->width, region->width) << name;
}

TEST(CropFuzzCorpusTest, SeedsCropAsTheirNamesSay) {
  const char* out = std::getenv("SOPHON_FUZZ_CORPUS_OUT");
  size_t total = 0;
  std::vector<absl::StatusCode> codes;
  for (const Seed& seed : MakeSeeds()) {
    ExpectCropAsNamed(seed.name, seed.bytes);
    codes.push_back(ExpectedCode(seed.name));
    EXPECT_LT(seed.bytes.size(), 16u << 10) << seed.name;
    total += seed.bytes.size();
    if (out != nullptr) testing::WriteFile(std::string(out) + "/" + seed.name, seed.bytes);
  }
  EXPECT_LT(total, 120u << 10);
  // Every status the crop documents has a seed.
  for (absl::StatusCode code :
       {absl::StatusCode::kOk, absl::StatusCode::kUnimplemented, absl::StatusCode::kDataLoss,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kInvalidArgument}) {
    EXPECT_NE(std::find(codes.begin(), codes.end(), code), codes.end())
        << absl::StatusCodeToString(code);
  }
}

TEST(CropFuzzCorpusTest, CheckedInSeedsCropAsTheirNamesSay) {
  const std::filesystem::path dir = std::filesystem::path(SOPHON_SOURCE_DIR) / "fuzz/corpus/crop";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ExpectCropAsNamed(entry.path().filename().string(), testing::ReadFile(entry.path().string()));
    ++seeds;
  }
  EXPECT_GE(seeds, 30);
}

}  // namespace
}  // namespace sophon
