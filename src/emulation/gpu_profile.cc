#include "sophon/emulation/gpu_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sophon/base/csv.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

constexpr int kOriginalColumns = 12;

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

std::tuple<std::string, std::string, int> Key(const GpuProfileRow& row) {
  return {Lower(row.gpu_type), Lower(row.model), row.batch_size};
}

absl::Status RowError(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<int> ParseBatchSize(absl::string_view text, const std::string& where) {
  int value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value) || value <= 0) {
    return RowError(where, absl::StrCat("batch size must be a positive integer, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<double> ParseSeconds(absl::string_view text, absl::string_view column,
                                    const std::string& where) {
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value) ||
      value < 0) {
    return RowError(where,
                    absl::StrCat(column, " must be a number of seconds >= 0, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<GpuProfileRow> ParseSophonRow(absl::string_view line, const std::string& where) {
  absl::StatusOr<std::vector<std::string>> fields = csv::SplitQuotedFields(line, ',');
  if (!fields.ok()) return RowError(where, fields.status().message());
  std::vector<std::string> f = *std::move(fields);
  if (f.size() != 6) {
    return RowError(where, absl::StrCat("expected 6 comma-separated fields (", kGpuProfileHeader,
                                        "), got ", f.size()));
  }
  GpuProfileRow row;
  row.gpu_type = f[0];
  row.model = f[1];
  if (row.gpu_type.empty() || row.model.empty()) {
    return RowError(where, "gpu_type and model must not be empty");
  }
  ASSIGN_OR_RETURN(row.batch_size, ParseBatchSize(f[2], where));
  ASSIGN_OR_RETURN(row.copy_seconds, ParseSeconds(f[3], "copy_seconds_per_batch", where));
  ASSIGN_OR_RETURN(row.compute_seconds, ParseSeconds(f[4], "compute_seconds_per_batch", where));
  row.source = f[5];
  row.origin = where;
  return row;
}

bool IsNotAvailable(absl::string_view field) {
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(field), "N/A");
}

absl::StatusOr<GpuProfileRow> ParseOriginalRow(absl::string_view line, const std::string& where) {
  std::vector<std::string> f;
  for (absl::string_view field : absl::StrSplit(line, '\t')) f.emplace_back(field);
  if (f.size() != kOriginalColumns) {
    return RowError(
        where, absl::StrCat("expected ", kOriginalColumns,
                            " tab-separated fields (original emulator format), got ", f.size()));
  }
  for (std::string& field : f) field = std::string(absl::StripAsciiWhitespace(field));
  GpuProfileRow row;
  row.gpu_type = f[0];
  row.model = f[2];
  if (row.gpu_type.empty() || row.model.empty()) {
    return RowError(where, "GPU type and model name must not be empty");
  }
  ASSIGN_OR_RETURN(row.batch_size, ParseBatchSize(f[3], where));
  const std::string& reason = f[11];
  row.origin = where;
  if (IsNotAvailable(f[6]) || IsNotAvailable(f[7])) {
    row.fits = false;
    row.source =
        absl::StrCat("original emulator profile ", where, ": did not fit (GPU memory ", f[1],
                     ", required MB ", f[5], ")", reason.empty() ? "" : absl::StrCat(": ", reason));
    return row;
  }
  ASSIGN_OR_RETURN(row.copy_seconds, ParseSeconds(f[6], "cpu-to-gpu seconds per batch", where));
  ASSIGN_OR_RETURN(row.compute_seconds, ParseSeconds(f[7], "GPU compute seconds per batch", where));
  row.source = absl::StrCat("original emulator profile ", where, " (input size ", f[4], ")",
                            reason.empty() ? "" : absl::StrCat(": ", reason));
  return row;
}

bool IsSophonHeader(absl::string_view line) {
  std::string compact;
  for (char c : line) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) compact += c;
  }
  return absl::EqualsIgnoreCase(compact, kGpuProfileHeader);
}

std::string FormatSeconds(double s) { return absl::StrFormat("%.6g", s); }

}  // namespace

absl::StatusOr<GpuProfile> GpuProfile::Parse(absl::string_view text, const std::string& name) {
  enum class Format { kUnknown, kSophon, kOriginal } format = Format::kUnknown;
  GpuProfile profile;
  std::set<std::tuple<std::string, std::string, int>> seen;
  for (const csv::Line& numbered : csv::SplitLines(text)) {
    const absl::string_view line = numbered.text;
    const std::string where = absl::StrCat(name, ":", numbered.number);
    if (format != Format::kOriginal &&
        absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) {
      continue;
    }
    if (format == Format::kUnknown) {
      if (IsSophonHeader(line)) {
        format = Format::kSophon;
        continue;
      }
      if (absl::StrContains(line, '\t')) {
        format = Format::kOriginal;
      } else {
        return RowError(where,
                        absl::StrCat("not a GPU profile: expected the header '", kGpuProfileHeader,
                                     "' or 12 tab-separated fields (original format)"));
      }
    }
    absl::StatusOr<GpuProfileRow> row =
        format == Format::kSophon ? ParseSophonRow(line, where) : ParseOriginalRow(line, where);
    if (!row.ok()) return row.status();
    if (!seen.insert(Key(*row)).second) {
      return RowError(where, absl::StrCat("duplicate row for gpu '", row->gpu_type, "', model '",
                                          row->model, "', batch size ", row->batch_size));
    }
    profile.rows_.push_back(*std::move(row));
  }
  if (format == Format::kUnknown) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty GPU profile"));
  }
  return profile;
}

absl::StatusOr<GpuProfile> GpuProfile::Load(const std::string& path) {
  absl::StatusOr<std::string> text = csv::ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("GPU profile: ", text.status().message()));
  }
  return Parse(*text, path);
}

absl::StatusOr<GpuProfile> GpuProfile::LoadAll(const std::vector<std::string>& paths) {
  GpuProfile all;
  bool any = false;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(GpuProfile one, Load(path));
    all.Merge(one);
    any = true;
  }
  if (!any) return absl::InvalidArgumentError("no GPU profile path given");
  return all;
}

void GpuProfile::Merge(const GpuProfile& other) {
  for (const GpuProfileRow& row : other.rows_) {
    auto same = std::find_if(rows_.begin(), rows_.end(),
                             [&](const GpuProfileRow& r) { return Key(r) == Key(row); });
    if (same != rows_.end()) {
      *same = row;
    } else {
      rows_.push_back(row);
    }
  }
}

absl::StatusOr<GpuStepTime> GpuProfile::Lookup(const std::string& gpu_type,
                                               const std::string& model, int batch_size) const {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch size must be > 0, got ", batch_size));
  }
  std::vector<const GpuProfileRow*> matches;
  std::set<std::string> models_for_gpu, gpus;
  for (const GpuProfileRow& row : rows_) {
    gpus.insert(Lower(row.gpu_type));
    if (!absl::EqualsIgnoreCase(row.gpu_type, gpu_type)) continue;
    models_for_gpu.insert(Lower(row.model));
    if (absl::EqualsIgnoreCase(row.model, model)) matches.push_back(&row);
  }
  if (matches.empty()) {
    if (models_for_gpu.empty()) {
      return absl::NotFoundError(absl::StrCat("the GPU profile has no rows for GPU type '",
                                              gpu_type, "'; it has: ", absl::StrJoin(gpus, ", ")));
    }
    return absl::NotFoundError(
        absl::StrCat("the GPU profile has no rows for model '", model, "' on '", gpu_type,
                     "'; models on that GPU: ", absl::StrJoin(models_for_gpu, ", ")));
  }
  // A batch that did not fit means no larger batch fits either.
  for (const GpuProfileRow* row : matches) {
    if (!row->fits && row->batch_size <= batch_size) {
      return absl::FailedPreconditionError(
          absl::StrCat(model, " at batch size ", batch_size, " does not fit on ", gpu_type,
                       ": batch size ", row->batch_size, " did not (", row->source, ")"));
    }
  }
  const GpuProfileRow* best = nullptr;
  for (const GpuProfileRow* row : matches) {
    if (!row->fits) continue;
    if (best == nullptr) {
      best = row;
      continue;
    }
    const int d = std::abs(row->batch_size - batch_size);
    const int best_d = std::abs(best->batch_size - batch_size);
    // Ties go to the larger batch: it amortises fixed per-step costs as the
    // requested batch would.
    if (d < best_d || (d == best_d && row->batch_size > best->batch_size)) best = row;
  }
  if (best == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        model, " on ", gpu_type, ": every profiled batch size is marked N/A (did not fit)"));
  }
  GpuStepTime t;
  t.row = *best;
  const double factor = static_cast<double>(batch_size) / best->batch_size;
  t.copy_seconds = best->copy_seconds * factor;
  t.compute_seconds = best->compute_seconds * factor;
  t.scaled = best->batch_size != batch_size;
  if (t.scaled) {
    t.note = absl::StrFormat(
        "GPU profile has no row for %s batch %d on %s; scaled linearly from batch %d (%s, x%.4g): "
        "copy %ss, compute %ss per batch",
        model, batch_size, gpu_type, best->batch_size, best->origin, factor,
        FormatSeconds(t.copy_seconds), FormatSeconds(t.compute_seconds));
  } else {
    t.note = absl::StrFormat(
        "GPU profile row %s: %s batch %d on %s: copy %ss, compute %ss per "
        "batch (source: %s)",
        best->origin, model, batch_size, gpu_type, FormatSeconds(t.copy_seconds),
        FormatSeconds(t.compute_seconds), best->source);
  }
  return t;
}


std::string FormatGpuProfileCsv(const std::vector<GpuProfileRow>& rows) {
  std::string out = absl::StrCat(kGpuProfileHeader, "\n");
  for (const GpuProfileRow& r : rows) {
    if (!r.fits) continue;
    absl::StrAppend(&out, csv::QuoteField(r.gpu_type), ",", csv::QuoteField(r.model), ",", r.batch_size, ",",
                    absl::StrFormat("%.6g", r.copy_seconds), ",",
                    absl::StrFormat("%.6g", r.compute_seconds), ",", csv::QuoteField(r.source), "\n");
  }
  return out;
}

}  // namespace sophon
