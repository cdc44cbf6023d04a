// Op CPU times predicted from sample sizes, for profiles that carry sizes only
// (the published SOPHON profile never shipped its prep_times.csv):
//
//   op seconds = s_per_raw_byte * raw_bytes + s_per_source_pixel * source_pixels
//                + s_fixed + s_per_output_pixel * S * S
//
// per op of the op table. An op whose cost grows with its input (OpCost::
// kInputSized: jpeg_crop, decode_crop, decode_jpeg_crop) uses the first three
// terms, one that grows with its output (kOutputSized: flip, tensor) the
// last. decode_jpeg_crop's input is the region, not the file: predicting it
// from the file's size and pixels is the model's approximation.
// (seconds of one training-node thread; S = crop size). Decode reads every
// entropy-coded byte, but with DCT scaling and region decoding only part of
// the pixels, so both terms appear. The coefficients come from a calibration
// run (DefaultTimesModel) or are fitted to a measured local profile.
#ifndef SOPHON_PLANNING_TIMES_MODEL_H_
#define SOPHON_PLANNING_TIMES_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/ops/stage.h"
#include "sophon/planning/profile.h"

namespace sophon {

// One op's coefficients; seconds = the sum of each times its quantity.
struct OpCoefficients {
  double s_per_raw_byte = 0;      // per encoded byte; >= 0
  double s_per_source_pixel = 0;  // per source pixel (width * height); >= 0
  double s_fixed = 0;             // per sample; >= 0
  double s_per_output_pixel = 0;  // per output pixel (S * S); >= 0
};

struct TimesModel {
  // Per op (stage.h); which terms are fitted follows the op's OpCost.
  PerOp<OpCoefficients> ops;
  std::string source;  // where the coefficients come from, for reports

  // The one place these are checked: every coefficient finite and >= 0.
  absl::Status Validate() const;
};

// Coefficients calibrated with tools/bench/calibrate_times.cc on Sophon's own
// pipeline (see the definition for the run they come from).
TimesModel DefaultTimesModel();

// The model's op times for one sample. source_pixels == 0 (unknown) drops
// the per-pixel decode term.
OpTimes PredictOpTimes(const TimesModel& model, uint64_t raw_bytes, uint64_t source_pixels,
                       int crop_size);

// Replaces every sample's client times with the model's and marks the profile
// TimesSource::kModel.
void ApplyTimesModel(const TimesModel& model, DatasetProfile* profile);

// Least-squares fit of the model to a profile with measured times, e.g. a
// local profile whose times are to be carried over to a published profile.
// The input terms of an input-sized op are fitted jointly (non-negative: a
// term whose coefficient would be negative is dropped and the rest refitted);
// an output-sized op's cost is total seconds over total S * S pixels. FailedPrecondition
// if the profile has fewer than 3 samples or modelled times.
absl::StatusOr<TimesModel> FitTimesModel(const DatasetProfile& measured);

}  // namespace sophon

#endif  // SOPHON_PLANNING_TIMES_MODEL_H_
