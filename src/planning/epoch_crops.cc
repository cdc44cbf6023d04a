#include "sophon/planning/epoch_crops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace sophon {

std::optional<std::vector<double>> LeastSquares(const std::vector<std::vector<double>>& x,
                                                const std::vector<double>& y) {
  if (x.empty() || x.size() != y.size()) return std::nullopt;
  const size_t k = x[0].size();
  if (k == 0) return std::nullopt;
  std::vector<std::vector<double>> m(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].size() != k) return std::nullopt;
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) m[r][c] += x[i][r] * x[i][c];
      m[r][k] += x[i][r] * y[i];
    }
  }
  double scale = 0;
  for (size_t r = 0; r < k; ++r) scale = std::max(scale, std::abs(m[r][r]));
  for (size_t col = 0; col < k; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < k; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    if (std::abs(m[pivot][col]) < 1e-9 * scale) return std::nullopt;
    std::swap(m[col], m[pivot]);
    for (size_t r = 0; r < k; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (size_t c = col; c <= k; ++c) m[r][c] -= f * m[col][c];
    }
  }
  std::vector<double> out(k);
  for (size_t r = 0; r < k; ++r) {
    out[r] = m[r][k] / m[r][r];
    if (!std::isfinite(out[r])) return std::nullopt;
  }
  return out;
}

std::optional<LinearCropFit> FitLinearCrop(const std::vector<double>& y,
                                           const std::vector<double>& size,
                                           const std::vector<double>& part) {
  if (y.size() != size.size() || y.size() != part.size()) return std::nullopt;
  std::vector<std::vector<double>> x;
  for (size_t i = 0; i < y.size(); ++i) x.push_back({1.0, size[i], size[i] * part[i]});
  std::optional<std::vector<double>> c = LeastSquares(x, y);
  if (!c.has_value()) return std::nullopt;
  return LinearCropFit{(*c)[0], (*c)[1], (*c)[2]};
}

CropExtent CropExtentOf(const SampleKey& key, uint32_t width, uint32_t height,
                        const AugmentOptions& augment) {
  if (width == 0 || height == 0) return {};
  const SampleAugment a =
      AugmentFor(key, static_cast<int>(height), static_cast<int>(width), augment);
  CropExtent e;
  e.part = std::clamp(static_cast<double>(a.box.width) * a.box.height /
                          (static_cast<double>(width) * height),
                      0.0, 1.0);
  e.reach = std::clamp(static_cast<double>(a.box.top + a.box.height) / height, 0.0, 1.0);
  return e;
}

namespace {

constexpr Op kCropOps[] = {Op::kJpegCrop, Op::kDecodeCrop, Op::kDecodeJpegCrop};

// The features of every fit: 1, the file's size, the pixels kept and the rows read down to the
// box's bottom. The crop's bytes use the first three; the ops' times all four, or the first
// three when every box reaches alike (the evaluation transform on images of one shape makes
// the fourth proportional to the second); a missing coefficient is 0.
std::array<double, 4> Features(double size, double part, double reach) {
  return {1.0, size, size * part, size * reach};
}

bool Fittable(const DatasetProfile& profile, const SampleProfile& p) {
  return profile.stages.Has(Stage::kJpegCrop) && p.width > 0 && p.height > 0 &&
         p.crop_part > 0 && p.crop_reach > 0 && p.bytes[kFirstStage] > 1 &&
         p.bytes[Stage::kJpegCrop] > 0 && p.bytes[Stage::kJpegCrop] < p.bytes[kFirstStage];
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
  for (int k = 0; k < kFits; ++k) {
    std::vector<double> y;
    // The floor: the smallest measured, for the bytes as a part of the file.
    double floor = std::numeric_limits<double>::infinity();
    for (uint64_t id : model.fitted_) {
      const SampleProfile& p = profile.samples[id];
      const double raw = static_cast<double>(p.bytes[kFirstStage]);
      const double v = k == 0 ? static_cast<double>(p.bytes[Stage::kJpegCrop]) / model.size_unit_
                              : p.client[kCropOps[k - 1]];
      y.push_back(v);
      const double f = k == 0 ? static_cast<double>(p.bytes[Stage::kJpegCrop]) / raw : v;
      if (f > 0) floor = std::min(floor, f);
    }
    auto fit_with = [&](size_t features) {
      std::vector<std::vector<double>> x;
      for (uint64_t id : model.fitted_) {
        const SampleProfile& p = profile.samples[id];
        const std::array<double, 4> f = Features(
            static_cast<double>(p.bytes[kFirstStage]) / model.size_unit_, p.crop_part,
            p.crop_reach);
        x.emplace_back(f.begin(), f.begin() + features);
      }
      return LeastSquares(x, y);
    };
    std::optional<std::vector<double>> fit = fit_with(k == 0 ? 3 : 4);
    if (!fit.has_value() && k > 0) fit = fit_with(3);
    if (!fit.has_value()) return std::nullopt;
    fit->resize(4, 0.0);
    model.fit_[k] = *std::move(fit);
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
    if (p.bytes[kFirstStage] < 2) continue;  // no crop smaller than the file
    const CropExtent e = CropExtentOf(SampleKey{seed, epoch, id}, p.width, p.height, augment);
    part_sum += e.part;
    const double size = static_cast<double>(p.bytes[kFirstStage]) / size_unit_;
    auto at = [&](int k) {
      const std::array<double, 4> x = Features(size, e.part, e.reach);
      double v = 0;
      for (size_t j = 0; j < x.size(); ++j) v += fit_[k][j] * x[j];
      return v;
    };
    const double bytes = std::max(floor_[0] * size, at(0)) * size_unit_;
    p.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(std::clamp<int64_t>(
        std::llround(bytes), 1, static_cast<int64_t>(p.bytes[kFirstStage]) - 1));
    for (int k = 1; k < kFits; ++k) {
      p.client[kCropOps[k - 1]] = std::max(floor_[k], at(k));
    }
  }
  return fitted_.empty() ? 0 : part_sum / static_cast<double>(fitted_.size());
}

}  // namespace sophon
