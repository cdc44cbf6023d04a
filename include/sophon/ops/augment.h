// Deterministic augmentation: the random crop box and the flip bit of a sample
// are a pure function of (seed, epoch, sample id). Whether a sample is
// processed on the storage node or on the training node, the same bytes reach
// the model.
#ifndef SOPHON_OPS_AUGMENT_H_
#define SOPHON_OPS_AUGMENT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sophon/image/crop_box.h"

namespace sophon {

// torchvision's RandomResizedCrop + RandomHorizontalFlip parameters.
struct AugmentOptions {
  int crop_size = 224;           // output side S (pixels); 1..4096
  double scale_min = 0.08;       // crop area fraction range, 0 < min <= max <= 1
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // crop aspect ratio (w/h) range, 0 < min <= max
  double ratio_max = 4.0 / 3.0;
  double flip_probability = 0.5; // in [0, 1]
  // > 0: the evaluation transform instead (torchvision's Resize(R) then
  // CenterCrop(S), R = eval_resize >= S): the centre square of the image whose
  // side is the shorter side x S / R, resized to S, never flipped; the same
  // every epoch. 0: RandomResizedCrop and the flip above.
  int eval_resize = 0;

  // The one place these values are checked. Names the offending field.
  absl::Status Validate() const;
};

struct SampleAugment {
  CropBox box;
  bool flip = false;
};

// Identifies one sample's randomness.
struct SampleKey {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t id = 0;
};

// Source of uniform numbers for the crop algorithm (injectable for tests).
class UniformSource {
 public:
  virtual ~UniformSource() = default;
  // Uniform double in [lo, hi).
  virtual double Uniform(double lo, double hi) = 0;
  // Uniform integer in [lo, hi) (torch.randint semantics). REQUIRES: lo < hi.
  virtual int64_t RandInt(int64_t lo, int64_t hi) = 0;
};

// Counter-based generator: the n-th draw is a hash of (key, stream, n), so no
// state is shared between samples or threads.
class CounterRng final : public UniformSource {
 public:
  CounterRng(const SampleKey& key, uint64_t stream);
  double Uniform(double lo, double hi) override;
  int64_t RandInt(int64_t lo, int64_t hi) override;
  // Next 64 random bits.
  uint64_t Next();

 private:
  uint64_t base_;
  uint64_t counter_ = 0;
};

// torchvision RandomResizedCrop.get_params: up to 10 attempts, then the
// centre-crop fallback. REQUIRES: height, width > 0.
CropBox SampleCropBox(int height, int width, const AugmentOptions& options,
                      UniformSource& rng);

// Sets options->eval_resize from an augmentation mode: "random"
// (RandomResizedCrop and flips; eval_resize 0) or "none" (the evaluation
// transform, resizing to `resize`, or when it is 0 to round(S * 256 / 224),
// torchvision's 256 for S = 224). InvalidArgument naming the valid modes.
absl::Status SetAugmentMode(absl::string_view mode, int resize, AugmentOptions* options);

// The evaluation transform's box (options.eval_resize > 0): the centre
// square of side round(min(height, width) * S / R). REQUIRES: height, width > 0.
CropBox EvalCropBox(int height, int width, const AugmentOptions& options);

// The crop box and flip bit of one sample of an image of the given size:
// RandomResizedCrop's and a random flip, or the evaluation transform's.
SampleAugment AugmentFor(const SampleKey& key, int height, int width,
                         const AugmentOptions& options);

// The flip bit alone (the crop box is not involved): AugmentFor(...).flip.
bool FlipFor(const SampleKey& key, const AugmentOptions& options);

}  // namespace sophon

#endif  // SOPHON_OPS_AUGMENT_H_
