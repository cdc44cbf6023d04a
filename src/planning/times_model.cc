#include "sophon/planning/times_model.h"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sophon {
namespace {

constexpr int kTerms = 3;  // input-sized terms: raw bytes, source pixels, fixed

// Solves the k x k system a * x = b in place (Gaussian elimination with
// partial pivoting). false if it is singular.
bool Solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  const size_t k = b.size();
  for (size_t col = 0; col < k; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < k; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    if (std::fabs(a[pivot][col]) < 1e-12) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < k; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c < k; ++c) a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  x->assign(k, 0);
  for (size_t i = k; i-- > 0;) {
    double v = b[i];
    for (size_t c = i + 1; c < k; ++c) v -= a[i][c] * (*x)[c];
    (*x)[i] = v / a[i][i];
  }
  return true;
}

struct DecodeFit {
  std::array<double, kTerms> coef{};
  double residual = std::numeric_limits<double>::infinity();
};

// Non-negative least squares by enumerating the active sets (3 terms: 7
// subsets). Columns are scaled to unit RMS so bytes and pixels condition alike.
DecodeFit FitDecode(const std::vector<std::array<double, kTerms>>& rows,
                    const std::vector<double>& y, bool have_pixels) {
  std::array<double, kTerms> scale{};
  for (const auto& r : rows) {
    for (int t = 0; t < kTerms; ++t) scale[t] += r[t] * r[t];
  }
  for (int t = 0; t < kTerms; ++t) {
    scale[t] = scale[t] > 0 ? std::sqrt(scale[t] / rows.size()) : 0;
  }
  DecodeFit best;
  for (int mask = 1; mask < (1 << kTerms); ++mask) {
    std::vector<int> terms;
    for (int t = 0; t < kTerms; ++t) {
      if ((mask & (1 << t)) && scale[t] > 0 && (t != 1 || have_pixels)) terms.push_back(t);
    }
    if (terms.size() != static_cast<size_t>(__builtin_popcount(mask))) continue;
    const size_t k = terms.size();
    std::vector<std::vector<double>> ata(k, std::vector<double>(k, 0));
    std::vector<double> aty(k, 0);
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t p = 0; p < k; ++p) {
        const double vp = rows[i][terms[p]] / scale[terms[p]];
        aty[p] += vp * y[i];
        for (size_t q = 0; q < k; ++q) ata[p][q] += vp * rows[i][terms[q]] / scale[terms[q]];
      }
    }
    std::vector<double> x;
    if (!Solve(ata, aty, &x)) continue;
    DecodeFit fit;
    bool non_negative = true;
    for (size_t p = 0; p < k; ++p) {
      fit.coef[terms[p]] = x[p] / scale[terms[p]];
      if (fit.coef[terms[p]] < 0) non_negative = false;
    }
    if (!non_negative) continue;
    fit.residual = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      double pred = 0;
      for (int t = 0; t < kTerms; ++t) pred += fit.coef[t] * rows[i][t];
      fit.residual += (pred - y[i]) * (pred - y[i]);
    }
    if (fit.residual < best.residual) best = fit;
  }
  return best;
}

}  // namespace

absl::Status TimesModel::Validate() const {
  for (const OpInfo& op : kOpTable) {
    const OpCoefficients& c = ops[op.op];
    const std::pair<const char*, double> fields[] = {{"s_per_raw_byte", c.s_per_raw_byte},
                                                     {"s_per_source_pixel", c.s_per_source_pixel},
                                                     {"s_fixed", c.s_fixed},
                                                     {"s_per_output_pixel", c.s_per_output_pixel}};
    for (const auto& [name, value] : fields) {
      if (!std::isfinite(value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat("TimesModel.ops[", op.name, "].", name,
                                                       " must be finite and >= 0, got ", value));
      }
    }
  }
  return absl::OkStatus();
}

TimesModel DefaultTimesModel() {
  TimesModel m;
  // Calibration run: build/sophon-calibrate-times --epochs=6 on 400
  // OpenImages-like JPEGs (tools/make-dataset --n=400 --classes=4
  // --profile=openimages: long side 1024, quality 90-97, mean 279 KB, mean
  // 0.73 Mpx), S = 224, op times averaged over 6 epochs of random crops, one
  // thread of the shared 2-core development VM (AMD EPYC),
  // libjpeg-turbo 2.1.5 (Debian 12), -O2 (image_ops -O3). Measured means:
  // decode_crop 2.97 ms, flip 0.017 ms, tensor 0.171 ms; decode fit R^2 0.81
  // (the rest is the random crop: smaller crops decode at a smaller DCT
  // scale). For the published OpenImages sizes (mean 317 KB, 0.75 Mpx) this
  // predicts 3.3 ms of decode_crop per sample.
  // The run measured no lossless crops: jpeg_crop and decode_jpeg_crop are
  // 0 here (profiles with modelled times offer no JPEG_CROP stage).
  m.ops[Op::kDecodeCrop].s_per_raw_byte = 8.4959e-09;
  m.ops[Op::kDecodeCrop].s_per_source_pixel = 6.2437e-10;
  m.ops[Op::kDecodeCrop].s_fixed = 1.4281e-04;
  m.ops[Op::kFlip].s_per_output_pixel = 3.4451e-10;
  m.ops[Op::kTensor].s_per_output_pixel = 3.3989e-09;
  m.source =
      "built-in model: Sophon's pipeline measured by sophon-calibrate-times on "
      "OpenImages-like JPEGs (src/planning/times_model.cc)";
  return m;
}

OpTimes PredictOpTimes(const TimesModel& model, uint64_t raw_bytes, uint64_t source_pixels,
                       int crop_size) {
  const double out_pixels = static_cast<double>(crop_size) * crop_size;
  OpTimes t;
  for (const OpInfo& op : kOpTable) {
    const OpCoefficients& c = model.ops[op.op];
    switch (op.cost) {
      case OpCost::kInputSized:
        t[op.op] = c.s_per_raw_byte * static_cast<double>(raw_bytes) +
                   c.s_per_source_pixel * static_cast<double>(source_pixels) + c.s_fixed;
        break;
      case OpCost::kOutputSized: t[op.op] = c.s_per_output_pixel * out_pixels; break;
    }
  }
  return t;
}

void ApplyTimesModel(const TimesModel& model, DatasetProfile* profile) {
  for (SampleProfile& s : profile->samples) {
    s.client = PredictOpTimes(model, s.bytes[kFirstStage], s.source_pixels, profile->crop_size);
  }
  profile->times_source = TimesSource::kModel;
  profile->times_detail = model.source;
}

absl::StatusOr<TimesModel> FitTimesModel(const DatasetProfile& measured) {
  if (measured.times_source != TimesSource::kMeasured) {
    return absl::FailedPreconditionError(absl::StrCat(
        "profile of '", measured.dataset, "' has modelled times; fitting needs measured ones"));
  }
  if (measured.samples.size() < 3) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile of '", measured.dataset, "' has ", measured.samples.size(),
                     " samples; fitting a times model needs at least 3"));
  }
  std::vector<std::array<double, kTerms>> rows;
  bool have_pixels = true;
  for (const SampleProfile& s : measured.samples) {
    rows.push_back(
        {static_cast<double>(s.bytes[kFirstStage]), static_cast<double>(s.source_pixels), 1});
    if (s.source_pixels == 0) have_pixels = false;
  }
  const double out_pixels = static_cast<double>(measured.crop_size) * measured.crop_size *
                            static_cast<double>(measured.samples.size());
  TimesModel m;
  for (const OpInfo& op : kOpTable) {
    OpCoefficients& c = m.ops[op.op];
    std::vector<double> y;
    double total_s = 0;
    for (const SampleProfile& s : measured.samples) {
      y.push_back(s.client[op.op]);
      total_s += s.client[op.op];
    }
    switch (op.cost) {
      case OpCost::kInputSized: {
        const DecodeFit fit = FitDecode(rows, y, have_pixels);
        if (!std::isfinite(fit.residual)) {
          return absl::FailedPreconditionError(
              absl::StrCat("profile of '", measured.dataset, "': no non-negative ", op.name,
                           " fit (degenerate sizes)"));
        }
        c.s_per_raw_byte = fit.coef[0];
        c.s_per_source_pixel = fit.coef[1];
        c.s_fixed = fit.coef[2];
        break;
      }
      case OpCost::kOutputSized: c.s_per_output_pixel = total_s / out_pixels; break;
    }
  }
  m.source = absl::StrFormat("fitted to the measured profile of '%s' (%d samples, S=%d)",
                             measured.dataset, measured.samples.size(), measured.crop_size);
  return m;
}

}  // namespace sophon
