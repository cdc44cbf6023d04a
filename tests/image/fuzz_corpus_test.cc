// The seed corpus of the decode fuzzer (fuzz/corpus/decode): valid files of
// each colour model and coding, and the hostile files of issue 11. Each seed's
// name starts with the status a default (strict) decode gives it, and the test
// checks that for the seeds it makes and for the checked-in ones. To remake
// the checked-in corpus:
//   SOPHON_FUZZ_CORPUS_OUT=fuzz/corpus/decode build/fuzz_corpus_test
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sophon/image/jpeg_codec.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::EncodeJpeg;
using testing::JpegColor;
using testing::MakeTestImage;

struct Seed {
  std::string name;  // "<status>-<what>.jpg"
  std::string bytes;
};

std::vector<Seed> MakeSeeds() {
  const Image8 img = MakeTestImage(48, 64, 31);
  const Image8 big = MakeTestImage(96, 96, 32);
  std::vector<Seed> seeds = {
      {"ok-baseline-rgb.jpg", EncodeJpeg(img, {.quality = 75})},
      {"ok-progressive-rgb.jpg", EncodeJpeg(img, {.quality = 75, .progressive = true})},
      {"ok-baseline-gray.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kGray})},
      {"ok-progressive-gray.jpg",
       EncodeJpeg(img, {.quality = 75, .progressive = true, .color = JpegColor::kGray})},
      {"ok-adobe-cmyk.jpg", EncodeJpeg(img, {.quality = 75, .color = JpegColor::kCmyk})},
      {"ok-restart-markers.jpg", EncodeJpeg(img, {.quality = 75, .restart_interval = 1})},
      {"ok-scan-per-coefficient-gray.jpg",
       EncodeJpeg(MakeTestImage(16, 16, 33), {.quality = 75, .color = JpegColor::kGray,
                                              .scan_per_coefficient = true})},
      {"dataloss-truncated-scan.jpg",
       testing::TruncateScanKeepEoi(EncodeJpeg(big, {.quality = 75}))},
      {"dataloss-truncated-progressive.jpg",
       testing::TruncateScanKeepEoi(EncodeJpeg(big, {.quality = 75, .progressive = true}))},
      {"exhausted-progressive-10000x10000.jpg",
       testing::PatchDimensions(
           EncodeJpeg(MakeTestImage(16, 16, 34), {.quality = 50, .progressive = true}), 10000,
           10000)},
      {"exhausted-380-scans.jpg",
       EncodeJpeg(MakeTestImage(16, 16, 35), {.quality = 50, .scan_per_coefficient = true})},
      {"invalid-65000x65000.jpg",
       testing::PatchDimensions(EncodeJpeg(MakeTestImage(16, 16, 36), {.quality = 50}), 65000,
                                65000)},
  };
  return seeds;
}

absl::StatusCode ExpectedCode(const std::string& name) {
  const std::string status = name.substr(0, name.find('-'));
  if (status == "ok") return absl::StatusCode::kOk;
  if (status == "dataloss") return absl::StatusCode::kDataLoss;
  if (status == "exhausted") return absl::StatusCode::kResourceExhausted;
  return absl::StatusCode::kInvalidArgument;
}

TEST(FuzzCorpusTest, SeedsDecodeAsTheirNamesSay) {
  const char* out = std::getenv("SOPHON_FUZZ_CORPUS_OUT");
  size_t total = 0;
  for (const Seed& seed : MakeSeeds()) {
    EXPECT_EQ(DecodeJpeg(seed.bytes, DecodeLimits()).status().code(), ExpectedCode(seed.name))
        << seed.name;
    EXPECT_LT(seed.bytes.size(), 20u << 10) << seed.name;
    total += seed.bytes.size();
    if (out != nullptr) testing::WriteFile(std::string(out) + "/" + seed.name, seed.bytes);
  }
  EXPECT_LT(total, 200u << 10);
}

TEST(FuzzCorpusTest, CheckedInSeedsDecodeAsTheirNamesSay) {
  const std::filesystem::path dir = std::filesystem::path(SOPHON_SOURCE_DIR) / "fuzz/corpus/decode";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string bytes = testing::ReadFile(entry.path().string());
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(DecodeJpeg(bytes, DecodeLimits()).status().code(), ExpectedCode(name)) << name;
    ++seeds;
  }
  EXPECT_GE(seeds, 10);
}

}  // namespace
}  // namespace sophon
