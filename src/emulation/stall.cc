#include "sophon/emulation/stall.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sophon/base/csv.h"
#include "sophon/emulation/gpu_profile.h"

namespace sophon {
namespace {

constexpr char kCsvHeader[] =
    "label,images,synthetic_images_per_second,cached_epoch_seconds,configured_epoch_seconds,"
    "compute_seconds,prep_stall_seconds,fetch_stall_seconds,raw_prep_stall_seconds,"
    "raw_fetch_stall_seconds";
constexpr int kCsvColumns = 10;

bool Positive(double x) { return std::isfinite(x) && x > 0; }

double Fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

}  // namespace

double StallBreakdown::compute_fraction() const { return Fraction(compute_seconds, epoch_seconds); }
double StallBreakdown::prep_fraction() const { return Fraction(prep_stall_seconds, epoch_seconds); }
double StallBreakdown::fetch_fraction() const {
  return Fraction(fetch_stall_seconds, epoch_seconds);
}

absl::StatusOr<StallBreakdown> ComputeStallBreakdown(const StallInputs& in) {
  if (in.images == 0) return absl::InvalidArgumentError("stall breakdown: images must be > 0");
  if (!Positive(in.synthetic_images_per_second) || !Positive(in.cached_epoch_seconds) ||
      !Positive(in.configured_epoch_seconds)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stall breakdown: rates and times must be > 0, got synthetic %g img/s, cached %gs, "
        "configured %gs",
        in.synthetic_images_per_second, in.cached_epoch_seconds, in.configured_epoch_seconds));
  }
  StallBreakdown b;
  b.epoch_seconds = in.configured_epoch_seconds;
  const double ideal = in.images / in.synthetic_images_per_second;
  b.raw_prep_stall_seconds = in.cached_epoch_seconds - ideal;
  b.raw_fetch_stall_seconds = in.configured_epoch_seconds - in.cached_epoch_seconds;
  b.compute_seconds = std::min(ideal, b.epoch_seconds);
  b.prep_stall_seconds =
      std::clamp(b.raw_prep_stall_seconds, 0.0, b.epoch_seconds - b.compute_seconds);
  b.fetch_stall_seconds = b.epoch_seconds - b.compute_seconds - b.prep_stall_seconds;
  b.clamped = ideal > b.epoch_seconds || b.raw_prep_stall_seconds != b.prep_stall_seconds ||
              b.raw_fetch_stall_seconds != b.fetch_stall_seconds;
  return b;
}

std::string FormatStallTable(const std::vector<StallRow>& rows) {
  size_t width = 5;
  for (const StallRow& r : rows) width = std::max(width, r.label.size());
  std::string out = absl::StrFormat("%-*s  %9s  %18s  %18s  %18s\n", width, "run", "epoch s",
                                    "compute s (%)", "prep stall s (%)", "fetch stall s (%)");
  for (const StallRow& r : rows) {
    const StallBreakdown& b = r.breakdown;
    auto cell = [](double s, double f) { return absl::StrFormat("%9.2f (%5.1f%%)", s, 100 * f); };
    absl::StrAppendFormat(&out, "%-*s  %9.2f  %18s  %18s  %18s%s\n", width, r.label,
                          b.epoch_seconds, cell(b.compute_seconds, b.compute_fraction()),
                          cell(b.prep_stall_seconds, b.prep_fraction()),
                          cell(b.fetch_stall_seconds, b.fetch_fraction()), b.clamped ? "  *" : "");
  }
  bool any_clamped = false;
  for (const StallRow& r : rows) any_clamped = any_clamped || r.breakdown.clamped;
  if (any_clamped) {
    out += "* a raw difference was negative (run-to-run noise) and was clamped; see the CSV\n";
  }
  return out;
}

std::string FormatStallCsv(const std::vector<StallRow>& rows) {
  std::string out = absl::StrCat(kCsvHeader, "\n");
  for (const StallRow& r : rows) {
    const StallBreakdown& b = r.breakdown;
    absl::StrAppendFormat(&out, "%s,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n",
                          csv::QuoteField(r.label), r.inputs.images, r.inputs.synthetic_images_per_second,
                          r.inputs.cached_epoch_seconds, r.inputs.configured_epoch_seconds,
                          b.compute_seconds, b.prep_stall_seconds, b.fetch_stall_seconds,
                          b.raw_prep_stall_seconds, b.raw_fetch_stall_seconds);
  }
  return out;
}

absl::StatusOr<std::vector<StallRow>> ParseStallCsv(const std::string& text,
                                                    const std::string& name) {
  std::vector<StallRow> rows;
  bool header_seen = false;
  for (const csv::Line& line : csv::SplitLines(text)) {
    const int line_number = line.number;
    if (!header_seen) {
      header_seen = true;
      if (line.text != kCsvHeader) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", line_number, ": expected the stall CSV header '", kCsvHeader, "'"));
      }
      continue;
    }
    absl::StatusOr<std::vector<std::string>> f = csv::SplitQuotedFields(line.text, ',');
    if (!f.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_number, ": ", f.status().message()));
    }
    std::vector<double> v(f->size());
    bool ok = f->size() == kCsvColumns;
    for (size_t i = 1; ok && i < f->size(); ++i) ok = absl::SimpleAtod((*f)[i], &v[i - 1]);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number, ": expected ",
                                                     kCsvColumns, " fields: ", kCsvHeader));
    }
    const std::string label = (*f)[0];
    StallRow row;
    row.label = label;
    row.inputs.images = static_cast<uint64_t>(v[0]);
    row.inputs.synthetic_images_per_second = v[1];
    row.inputs.cached_epoch_seconds = v[2];
    row.inputs.configured_epoch_seconds = v[3];
    absl::StatusOr<StallBreakdown> b = ComputeStallBreakdown(row.inputs);
    if (!b.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_number, ": ", b.status().message()));
    }
    row.breakdown = *b;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace sophon
