#include "sophon/planning/epoch_crops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace sophon {

std::optional<LinearCropFit> FitLinearCrop(const std::vector<double>& y,
                                           const std::vector<double>& size,
                                           const std::vector<double>& part) {
  if (y.size() != size.size() || y.size() != part.size() || y.empty()) return std::nullopt;
  double m[3][4] = {};
  for (size_t i = 0; i < y.size(); ++i) {
    const double x[3] = {1.0, size[i], size[i] * part[i]};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) m[r][c] += x[r] * x[c];
      m[r][3] += x[r] * y[i];
    }
  }
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    if (std::abs(m[pivot][col]) < 1e-9 * std::abs(m[0][0])) return std::nullopt;
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int c = col; c < 4; ++c) m[r][c] -= f * m[col][c];
    }
  }
  LinearCropFit fit{m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]};
  if (!std::isfinite(fit.a) || !std::isfinite(fit.b) || !std::isfinite(fit.c)) return std::nullopt;
  return fit;
}

double CropPart(const SampleKey& key, uint32_t width, uint32_t height,
                const AugmentOptions& augment) {
  if (width == 0 || height == 0) return 0;
  const SampleAugment a =
      AugmentFor(key, static_cast<int>(height), static_cast<int>(width), augment);
  const double part = static_cast<double>(a.box.width) * a.box.height /
                      (static_cast<double>(width) * height);
  return std::clamp(part, 0.0, 1.0);
}

namespace {

constexpr Op kCropOps[] = {Op::kJpegCrop, Op::kDecodeCrop, Op::kDecodeJpegCrop};

bool Fittable(const DatasetProfile& profile, const SampleProfile& p) {
  return profile.stages.Has(Stage::kJpegCrop) && p.width > 0 && p.height > 0 &&
         p.crop_part > 0 && p.bytes[kFirstStage] > 0 && p.bytes[Stage::kJpegCrop] > 0 &&
         p.bytes[Stage::kJpegCrop] < p.bytes[kFirstStage];
}

}  // namespace

std::optional<EpochCropModel> EpochCropModel::Fit(const DatasetProfile& profile) {
  EpochCropModel model;
  double size_sum = 0;
  for (const SampleProfile& p : profile.samples) {
    if (!Fittable(profile, p)) continue;
    model.fitted_.push_back(p.id);
    size_sum += static_cast<double>(p.bytes[kFirstStage]);
  }
  if (model.fitted_.size() < kMinSamplesForCropFit) return std::nullopt;
  // Sizes in units of the mean file: the normal equations' terms are then all near 1.
  model.size_unit_ = size_sum / static_cast<double>(model.fitted_.size());
  std::vector<double> size, part;
  for (uint64_t id : model.fitted_) {
    const SampleProfile& p = profile.samples[id];
    size.push_back(static_cast<double>(p.bytes[kFirstStage]) / model.size_unit_);
    part.push_back(p.crop_part);
  }
  for (int k = 0; k < kFits; ++k) {
    std::vector<double> y;
    double floor = std::numeric_limits<double>::infinity();
    for (uint64_t id : model.fitted_) {
      const SampleProfile& p = profile.samples[id];
      const double v = k == 0 ? static_cast<double>(p.bytes[Stage::kJpegCrop]) / model.size_unit_
                              : p.client[kCropOps[k - 1]];
      y.push_back(v);
      if (v > 0) floor = std::min(floor, v);
    }
    std::optional<LinearCropFit> fit = FitLinearCrop(y, size, part);
    if (!fit.has_value()) return std::nullopt;
    model.fit_[k] = *fit;
    model.floor_[k] = std::isfinite(floor) ? floor : 0;
  }
  return model;
}

double EpochCropModel::Apply(uint64_t seed, uint64_t epoch, const AugmentOptions& augment,
                             DatasetProfile* profile) const {
  double part_sum = 0;
  for (uint64_t id : fitted_) {
    if (id >= profile->samples.size()) continue;
    SampleProfile& p = profile->samples[id];
    const double part = CropPart(SampleKey{seed, epoch, id}, p.width, p.height, augment);
    part_sum += part;
    const double raw = static_cast<double>(p.bytes[kFirstStage]);
    const double size = raw / size_unit_;
    const double bytes = std::max(floor_[0], fit_[0].At(size, part)) * size_unit_;
    p.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(std::clamp<int64_t>(
        std::llround(bytes), 1, static_cast<int64_t>(p.bytes[kFirstStage]) - 1));
    for (int k = 1; k < kFits; ++k) {
      p.client[kCropOps[k - 1]] = std::max(floor_[k], fit_[k].At(size, part));
    }
  }
  return fitted_.empty() ? 0 : part_sum / static_cast<double>(fitted_.size());
}

}  // namespace sophon
