// Planning each epoch at the crops it draws. A sample's crop box is a pure function of the
// job's seed, the epoch, the sample's id and its image's size (ops/augment.h), so a planner
// that knows the images' sizes knows, before an epoch starts, which samples' lossless crops
// come out small (cheap to send) and which come out large. A profile holds one epoch's crops;
// EpochCropModel fits, over its samples, how the lossless crop's bytes and the times of the
// ops that depend on the crop grow with the file's size and the part of the image the crop
// keeps, and sets them for any epoch's boxes.
#ifndef SOPHON_PLANNING_EPOCH_CROPS_H_
#define SOPHON_PLANNING_EPOCH_CROPS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "sophon/ops/augment.h"
#include "sophon/planning/profile.h"

namespace sophon {

// Least squares: the coefficients c minimising sum_i (y_i - sum_k c_k x_ik)^2, from the
// normal equations (Gaussian elimination with partial pivoting). nullopt when they are
// singular (a feature constant or two proportional over the rows) or the rows are ragged.
std::optional<std::vector<double>> LeastSquares(const std::vector<std::vector<double>>& x,
                                                const std::vector<double>& y);

// y = a + b * size + c * size * part, fitted by least squares (size in any unit, part in
// [0, 1]).
struct LinearCropFit {
  double a = 0, b = 0, c = 0;
  double At(double size, double part) const { return a + b * size + c * size * part; }
};
std::optional<LinearCropFit> FitLinearCrop(const std::vector<double>& y,
                                           const std::vector<double>& size,
                                           const std::vector<double>& part);

// Where a sample's crop box lies in its width x height image: the part of the image (pixel
// area) it keeps, and the part of the rows down to its bottom edge. Zeros when the size is
// unknown (0).
struct CropExtent {
  double part = 0;
  double reach = 0;
};
CropExtent CropExtentOf(const SampleKey& key, uint32_t width, uint32_t height,
                        const AugmentOptions& augment);

// Fewest samples a fit is made from.
inline constexpr size_t kMinSamplesForCropFit = 20;

class EpochCropModel {
 public:
  // Fitted over the samples whose image size and profiled crop part are known and whose crop
  // was not declined (JPEG_CROP smaller than the file). nullopt when the profile has no
  // JPEG_CROP or fewer than kMinSamplesForCropFit such samples, or a fit is singular: an
  // older profile, without the images' sizes, is planned at the average crop
  // (UseExpectedJpegCrops).
  static std::optional<EpochCropModel> Fit(const DatasetProfile& profile);

  // Sets, in `profile` (the one fitted, or a copy), each fitted sample's JPEG_CROP bytes and
  // the lossless crop's, the file decode's and the region decode's times at the crop box
  // (seed, epoch, id) draws. Other samples keep what they have. Returns the mean part kept.
  // The bytes follow size and size * part; the times size, size * part (the pixels kept) and
  // size * reach (the rows read: decoding stops after the box's last row).
  double Apply(uint64_t seed, uint64_t epoch, const AugmentOptions& augment,
               DatasetProfile* profile) const;

  size_t samples() const { return fitted_.size(); }

 private:
  static constexpr int kFits = 4;  // the crop's bytes, then the three ops' times
  std::array<std::vector<double>, kFits> fit_{};  // 4 coefficients each (Features(), 0 if unused)
  // The smallest value measured: for the bytes, the smallest crop as a part of its file.
  std::array<double, kFits> floor_{};
  double size_unit_ = 1;               // the mean file size
  std::vector<uint64_t> fitted_;       // ids of the samples fitted (and set by Apply)
};

}  // namespace sophon

#endif  // SOPHON_PLANNING_EPOCH_CROPS_H_
