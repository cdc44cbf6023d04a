#include "sophon/planning/original_profile.h"

#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sophon/base/csv.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

// Column name -> field position, from a header line.
using ColumnIndex = std::map<std::string, size_t, std::less<>>;

absl::StatusOr<ColumnIndex> ParseHeader(const csv::Line& line, char sep,
                                        const std::vector<const char*>& required,
                                        absl::string_view file) {
  ColumnIndex columns;
  const std::vector<absl::string_view> fields = csv::SplitFields(line.text, sep);
  for (size_t i = 0; i < fields.size(); ++i) columns.emplace(std::string(fields[i]), i);
  std::vector<std::string> missing;
  for (const char* name : required) {
    if (columns.find(name) == columns.end()) missing.emplace_back(name);
  }
  if (!missing.empty()) {
    return csv::LineError(file, line.number,
                          absl::StrCat("header lacks column(s) ", absl::StrJoin(missing, ", "),
                                       " (separator '", std::string(1, sep), "')"));
  }
  return columns;
}

// The fields of a data row, checked against the header's field count.
absl::StatusOr<std::vector<absl::string_view>> RowFields(const csv::Line& line, char sep,
                                                         size_t expected, absl::string_view file) {
  std::vector<absl::string_view> fields = csv::SplitFields(line.text, sep);
  if (fields.size() != expected) {
    return csv::LineError(file, line.number,
                          absl::StrCat("expected ", expected, " '", std::string(1, sep),
                                       "'-separated fields as in the header, got ", fields.size()));
  }
  return fields;
}

// Column `name`'s field as `parse` reads it; a LineError naming the column
// and what it expected otherwise.
template <typename T>
absl::StatusOr<T> ParsedField(const std::vector<absl::string_view>& fields,
                              const ColumnIndex& columns, absl::string_view name,
                              const csv::Line& line, absl::string_view file,
                              bool (*parse)(absl::string_view, T*), absl::string_view expected) {
  const absl::string_view field = fields[columns.find(name)->second];
  T value = 0;
  if (!parse(field, &value)) {
    return csv::LineError(file, line.number,
                          absl::StrCat(name, ": expected ", expected, ", got '", field, "'"));
  }
  return value;
}

absl::StatusOr<uint64_t> UintField(const std::vector<absl::string_view>& fields,
                                   const ColumnIndex& columns, absl::string_view name,
                                   const csv::Line& line, absl::string_view file) {
  return ParsedField<uint64_t>(fields, columns, name, line, file, &csv::ParseUint,
                               "a whole number of bytes");
}

bool ParseSeconds(absl::string_view text, double* seconds) {
  return csv::ParseDouble(text, seconds) && *seconds >= 0;
}

absl::StatusOr<double> SecondsField(const std::vector<absl::string_view>& fields,
                                    const ColumnIndex& columns, absl::string_view name,
                                    const csv::Line& line, absl::string_view file) {
  return ParsedField<double>(fields, columns, name, line, file, &ParseSeconds, "seconds >= 0");
}

// "(1024, 768)" -> 1024 * 768.
absl::StatusOr<uint64_t> ShapePixels(absl::string_view field, const csv::Line& line,
                                     absl::string_view file) {
  absl::string_view s = absl::StripAsciiWhitespace(field);
  const auto bad = [&] {
    return csv::LineError(file, line.number,
                          absl::StrCat("original_shape: expected '(WIDTH, "
                                       "HEIGHT)', got '",
                                       field, "'"));
  };
  if (!absl::ConsumePrefix(&s, "(") || !absl::ConsumeSuffix(&s, ")")) return bad();
  const std::vector<absl::string_view> parts = absl::StrSplit(s, ',');
  if (parts.size() != 2) return bad();
  uint64_t w = 0, h = 0;
  if (!csv::ParseUint(absl::StripAsciiWhitespace(parts[0]), &w) ||
      !csv::ParseUint(absl::StripAsciiWhitespace(parts[1]), &h) || w == 0 || h == 0 ||
      w > (1u << 20) || h > (1u << 20)) {
    return bad();
  }
  return w * h;
}

// S from a CROPPED size of S * S * 3 bytes plus at most a small object header.
absl::StatusOr<int> InferCropSize(uint64_t cropped_bytes, const csv::Line& line,
                                  absl::string_view file) {
  const int s = static_cast<int>(std::sqrt(static_cast<double>(cropped_bytes) / 3));
  for (int cand : {s - 1, s, s + 1}) {
    if (cand <= 0) continue;
    const uint64_t exact = static_cast<uint64_t>(cand) * cand * 3;
    if (cropped_bytes >= exact && cropped_bytes - exact <= 256) return cand;
  }
  return csv::LineError(
      file, line.number,
      absl::StrCat("cannot infer the crop size from RandomResizedCrop = ", cropped_bytes,
                   " bytes (expected S*S*3, plus a header); "
                   "give the crop size explicitly"));
}

}  // namespace

// The original system's columns for each of our stages: the size file's
// column of each stage's payload, and the time file's columns whose sum is
// each op's time (its loader, decoding and crop make our decode_crop). The
// original system had no lossless crop: JPEG_CROP gets the file's size, no
// op times, and is left out of the profile's stages, so no plan picks it.
// It had no backbone either: FEATURES and PREDICTIONS have no column (0
// bytes, not measured) and are left out too.
constexpr std::pair<Stage, const char*> kSizeColumns[] = {
    {Stage::kRaw, "raw"},
    {Stage::kJpegCrop, "raw"},
    {Stage::kCropped, "RandomResizedCrop"},
    {Stage::kFlipped, "RandomHorizontalFlip"},
    {Stage::kTensor, "Normalize"},
    {Stage::kFeatures, nullptr},
    {Stage::kPredictions, nullptr},
};
static_assert(std::size(kSizeColumns) == kNumStages, "every stage needs its size column");
constexpr std::pair<Op, const char*> kTimeColumns[] = {
    {Op::kDecodeCrop, "loader"},   {Op::kDecodeCrop, "decoding"},
    {Op::kDecodeCrop, "RandomResizedCrop"}, {Op::kFlip, "RandomHorizontalFlip"},
    {Op::kTensor, "ToTensor"},  {Op::kTensor, "Normalize"},
};
// The stages the original files measured.
static StageSet OriginalStages() {
  return StageSet::BeforeFeatures().Remove(Stage::kJpegCrop);
}

absl::StatusOr<DatasetProfile> ParseOriginalSizes(absl::string_view text,
                                                  absl::string_view file_name, int crop_size) {
  const std::vector<csv::Line> lines = csv::SplitLines(text);
  if (lines.empty()) return csv::LineError(file_name, 1, "empty file (expected a header line)");
  ASSIGN_OR_RETURN(const ColumnIndex columns,
                   ParseHeader(lines[0], ';',
                               {"index", "raw", "original_shape", "RandomResizedCrop",
                                "RandomHorizontalFlip", "Normalize"},
                               file_name));
  DatasetProfile profile;
  profile.crop_size = crop_size;
  profile.times_source = TimesSource::kMeasured;
  profile.stages = OriginalStages();
  for (size_t i = 1; i < lines.size(); ++i) {
    const csv::Line& line = lines[i];
    ASSIGN_OR_RETURN(const std::vector<absl::string_view> f,
                     RowFields(line, ';', columns.size(), file_name));
    SampleProfile s;
    ASSIGN_OR_RETURN(s.id, UintField(f, columns, "index", line, file_name));
    if (s.id != profile.samples.size()) {
      return csv::LineError(
          file_name, line.number,
          absl::StrCat("index ", s.id, " out of sequence (expected ", profile.samples.size(), ")"));
    }
    for (const auto& [stage, column] : kSizeColumns) {
      if (column == nullptr) continue;
      ASSIGN_OR_RETURN(s.bytes[stage], UintField(f, columns, column, line, file_name));
      if (s.bytes[stage] == 0) {
        return csv::LineError(file_name, line.number, "every size must be > 0 bytes");
      }
    }
    ASSIGN_OR_RETURN(s.source_pixels,
                     ShapePixels(f[columns.find("original_shape")->second], line, file_name));
    if (profile.crop_size == 0) {
      ASSIGN_OR_RETURN(profile.crop_size, InferCropSize(s.bytes[Stage::kCropped], line, file_name));
    }
    profile.samples.push_back(s);
  }
  if (profile.samples.empty()) {
    return csv::LineError(file_name, lines[0].number, "header only, no samples");
  }
  return profile;
}

absl::Status ParseOriginalTimes(absl::string_view text, absl::string_view file_name,
                                DatasetProfile* profile) {
  const std::vector<csv::Line> lines = csv::SplitLines(text);
  if (lines.empty()) return csv::LineError(file_name, 1, "empty file (expected a header line)");
  ASSIGN_OR_RETURN(const ColumnIndex columns,
                   ParseHeader(lines[0], ',',
                               {"index", "loader", "decoding", "RandomResizedCrop",
                                "RandomHorizontalFlip", "ToTensor", "Normalize"},
                               file_name));
  const size_t n = profile->samples.size();
  std::vector<OpTimes> times(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    const csv::Line& line = lines[i];
    ASSIGN_OR_RETURN(const std::vector<absl::string_view> f,
                     RowFields(line, ',', columns.size(), file_name));
    ASSIGN_OR_RETURN(const uint64_t index, UintField(f, columns, "index", line, file_name));
    if (index != i - 1) {
      return csv::LineError(
          file_name, line.number,
          absl::StrCat("index ", index, " out of sequence (expected ", i - 1, ")"));
    }
    for (const auto& [op, column] : kTimeColumns) {
      ASSIGN_OR_RETURN(const double seconds, SecondsField(f, columns, column, line, file_name));
      times[i - 1][op] += seconds;
    }
  }
  if (times.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, " has ", times.size(), " samples, the sizes file has ", n));
  }
  for (size_t i = 0; i < n; ++i) profile->samples[i].client = times[i];
  profile->times_source = TimesSource::kMeasured;
  profile->times_detail = absl::StrCat("measured (", file_name, ")");
  return absl::OkStatus();
}

absl::StatusOr<DatasetProfile> ReadOriginalProfile(const OriginalProfileOptions& options) {
  ASSIGN_OR_RETURN(const std::string sizes_text, csv::ReadFile(options.sizes_path));
  ASSIGN_OR_RETURN(DatasetProfile profile,
                   ParseOriginalSizes(sizes_text, options.sizes_path, options.crop_size));
  profile.dataset = options.dataset;
  if (profile.dataset.empty()) {
    profile.dataset =
        fs::absolute(options.sizes_path).lexically_normal().parent_path().filename().string();
  }
  if (options.times_path.empty()) {
    RETURN_IF_ERROR(options.model.Validate());
    ApplyTimesModel(options.model, &profile);
  } else {
    ASSIGN_OR_RETURN(const std::string times_text, csv::ReadFile(options.times_path));
    RETURN_IF_ERROR(ParseOriginalTimes(times_text, options.times_path, &profile));
  }
  if (absl::Status s = profile.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(options.sizes_path, ": ", s.message()));
  }
  return profile;
}

}  // namespace sophon
