// Helpers shared by tests: a JPEG encoder and synthetic datasets of real JPEG
// files written to a temporary directory.
#ifndef SOPHON_TESTS_TEST_UTIL_H_
#define SOPHON_TESTS_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/stage.h"

namespace sophon::testing {

// kCmyk is stored as YCCK with an Adobe marker (what Photoshop writes),
// kPlainCmyk as CMYK with one, kCmykNoAdobe as CMYK without (not inverted).
// kRgbStored keeps R, G, B unconverted (Adobe transform 0).
enum class JpegColor { kRgb, kGray, kCmyk, kPlainCmyk, kCmykNoAdobe, kRgbStored };
// Chroma sampling of a colour file (luma factors; chroma 1x1). k411 is 4x1.
// k420..k411 subsample the chroma; kMixed samples Cb 2x1 and Cr 1x2 beside
// Y 2x2; kLumaSubsampled is a layout where luma is not the largest plane
// (Y 2x2, Cb 1x4, Cr 1x1).
enum class Sampling { k420, k422, k444, k440, k411, kMixed, kLumaSubsampled };

struct EncodeOptions {
  int quality = 90;
  bool progressive = false;
  JpegColor color = JpegColor::kRgb;
  int restart_interval = 0;  // in MCU rows; 0 = none
  // Progressive with one scan per component, AC coefficient and bit: a valid
  // file of 2 + 126 * components scans (380 in colour). Implies progressive.
  bool scan_per_coefficient = false;
  Sampling sampling = Sampling::k420;
  bool arithmetic = false;  // arithmetic instead of Huffman coding
  // Progressive with a script that never refines the lowest bit of the AC
  // coefficients (libjpeg decodes it with block smoothing). Implies progressive.
  bool unrefined_progression = false;
};

// Every encoding the decoder and the lossless crop are tested on, by name:
// baseline and progressive at 4:2:0, 4:2:2, 4:4:4, 4:4:0 and 4:1:1, restart
// markers, chroma planes sampled 2x1 and 1x2, gray, YCCK, CMYK with and
// without an Adobe marker, RGB stored, arithmetic coding.
struct NamedEncoding {
  std::string name;
  EncodeOptions options;
};
std::vector<NamedEncoding> AllJpegEncodings();

// The chroma subsamplings by name: 420, 422, 444, 440, 411.
std::vector<std::pair<std::string, Sampling>> ChromaSamplings();

// A smooth, photo-like RGB test image (gradients, a few shapes, mild noise).
Image8 MakeTestImage(int height, int width, uint64_t seed);

// Encodes RGB pixels as a JPEG (converted to gray or CMYK if asked).
std::string EncodeJpeg(const Image8& image, const EncodeOptions& options = {});

// Hostile files (issue 11), made from a valid JPEG by editing its bytes.
// The scan data cut in the middle, followed by an EOI marker: libjpeg warns
// "premature end of data segment" and pads the rest grey.
std::string TruncateScanKeepEoi(const std::string& jpeg);
// The frame header (SOF0/SOF2) patched to claim height x width.
std::string PatchDimensions(const std::string& jpeg, int height, int width);

// `size` bytes that stand for sample `id`'s file: different for every id.
std::string SampleFileBytes(uint64_t id, size_t size = 1000);

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);

void WriteFile(const std::string& path, const std::string& bytes);
// The whole file at `path` (empty if it cannot be read).
std::string ReadFile(const std::string& path);

struct TestDatasetOptions {
  int classes = 3;
  int per_class = 4;
  int min_side = 160;  // images are random sizes in [min_side, max_side]
  int max_side = 320;
  uint64_t seed = 1;
  // The k-th file written (class by class) is encoded with
  // encodings[k % encodings.size()]; empty: the default encoding.
  std::vector<EncodeOptions> encodings;
};

// Writes ROOT/class_i/img_j.jpg; returns ROOT.
std::string MakeTestDataset(const std::string& name, const TestDatasetOptions& options);

// Op times of a profile without the lossless crop: decode_crop, flip and
// tensor; the lossless crop costs 0 and the decode of its region what the
// file's does (such a profile leaves JPEG_CROP out of its stages).
inline OpTimes MakeOpTimes(double decode_crop, double flip, double tensor) {
  OpTimes t;
  t[Op::kDecodeCrop] = decode_crop;
  t[Op::kDecodeJpegCrop] = decode_crop;
  t[Op::kFlip] = flip;
  t[Op::kTensor] = tensor;
  return t;
}

// The stages of a profile taken without the lossless crop (and without a
// backbone).
inline StageSet StagesWithoutJpegCrop() {
  return StageSet::BeforeFeatures().Remove(Stage::kJpegCrop);
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_TEST_UTIL_H_
