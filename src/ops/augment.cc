#include "sophon/ops/augment.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

// splitmix64 finalizer: a strong 64-bit mixing function.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Python's round(): half to even (std::nearbyint in the default rounding mode).
int RoundHalfEven(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

absl::Status AugmentOptions::Validate() const {
  if (crop_size < 1 || crop_size > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("crop size must be in [1, 4096], got ", crop_size));
  }
  if (!(scale_min > 0 && scale_min <= scale_max && scale_max <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crop scale range must satisfy 0 < min <= max <= 1, got (", scale_min, ", ",
        scale_max, ")"));
  }
  if (!(ratio_min > 0 && ratio_min <= ratio_max && std::isfinite(ratio_max))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crop ratio range must satisfy 0 < min <= max, got (", ratio_min, ", ", ratio_max,
        ")"));
  }
  if (eval_resize != 0 && (eval_resize < crop_size || eval_resize > 16384)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation resize must be 0 (random crops) or in [crop size ", crop_size,
        ", 16384], got ", eval_resize));
  }
  if (!(flip_probability >= 0 && flip_probability <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flip probability must be in [0, 1], got ", flip_probability));
  }
  return absl::OkStatus();
}

CounterRng::CounterRng(const SampleKey& key, uint64_t stream)
    : base_(Mix(Mix(Mix(Mix(key.seed) ^ key.epoch) ^ key.id) ^ stream)) {}

uint64_t CounterRng::Next() { return Mix(base_ ^ Mix(counter_++)); }

double CounterRng::Uniform(double lo, double hi) {
  // 53 random bits -> [0, 1).
  const double u = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

int64_t CounterRng::RandInt(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  // Multiply-shift mapping; the bias for spans of image sizes is < 2^-40.
  const unsigned __int128 wide = static_cast<unsigned __int128>(Next()) * span;
  return lo + static_cast<int64_t>(wide >> 64);
}

CropBox SampleCropBox(int height, int width, const AugmentOptions& options,
                      UniformSource& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_ratio_min = std::log(options.ratio_min);
  const double log_ratio_max = std::log(options.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(options.scale_min, options.scale_max);
    const double aspect_ratio = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    // Rounded as doubles and range-checked before any conversion: a client's
    // ratio range may be huge (1e300 is finite), and converting an
    // out-of-range double to int is undefined behaviour (found by the
    // request fuzzer).
    const double wd = std::nearbyint(std::sqrt(target_area * aspect_ratio));
    const double hd = std::nearbyint(std::sqrt(target_area / aspect_ratio));
    if (0 < wd && wd <= width && 0 < hd && hd <= height) {
      const int w = static_cast<int>(wd);
      const int h = static_cast<int>(hd);
      CropBox box;
      box.top = static_cast<int>(rng.RandInt(0, height - h + 1));
      box.left = static_cast<int>(rng.RandInt(0, width - w + 1));
      box.height = h;
      box.width = w;
      return box;
    }
  }
  // Fallback to a central crop.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_ratio < options.ratio_min) {
    w = width;
    h = RoundHalfEven(w / options.ratio_min);
  } else if (in_ratio > options.ratio_max) {
    h = height;
    w = RoundHalfEven(h * options.ratio_max);
  }
  h = std::clamp(h, 1, height);
  w = std::clamp(w, 1, width);
  CropBox box;
  box.top = (height - h) / 2;
  box.left = (width - w) / 2;
  box.height = h;
  box.width = w;
  return box;
}

absl::Status SetAugmentMode(absl::string_view mode, int resize, AugmentOptions* options) {
  if (mode == "random") {
    options->eval_resize = 0;
    return absl::OkStatus();
  }
  if (mode == "none") {
    options->eval_resize =
        resize > 0 ? resize : RoundHalfEven(options->crop_size * 256.0 / 224.0);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "augmentation must be random (RandomResizedCrop and flips) or none (resize and centre "
      "crop), got '", mode, "'"));
}

CropBox EvalCropBox(int height, int width, const AugmentOptions& options) {
  const int shorter = std::min(height, width);
  const double side = std::nearbyint(static_cast<double>(shorter) * options.crop_size /
                                     std::max(options.eval_resize, 1));
  CropBox box;
  box.height = box.width = std::clamp(static_cast<int>(side), 1, shorter);
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

SampleAugment AugmentFor(const SampleKey& key, int height, int width,
                         const AugmentOptions& options) {
  if (options.eval_resize > 0) return SampleAugment{EvalCropBox(height, width, options), false};
  // Separate streams so the number of crop attempts never shifts the flip draw.
  CounterRng crop_rng(key, /*stream=*/0);
  SampleAugment result;
  result.box = SampleCropBox(height, width, options, crop_rng);
  result.flip = FlipFor(key, options);
  return result;
}

bool FlipFor(const SampleKey& key, const AugmentOptions& options) {
  if (options.eval_resize > 0) return false;
  CounterRng flip_rng(key, /*stream=*/1);
  return flip_rng.Uniform(0.0, 1.0) < options.flip_probability;
}

}  // namespace sophon
