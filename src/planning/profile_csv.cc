#include "sophon/planning/profile_csv.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/csv.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

constexpr char kMagicPrefix[] = "# sophon-profile ";
// The version written; versions kOldestVersion .. kVersion are read.
constexpr int kVersion = 5;
constexpr int kOldestVersion = 2;
// The version that added the image's width and height and the profiled crop's part of it.
constexpr int kCropColumnsSince = 5;

// The version that added each stage's size column and each op's time column:
// FEATURES (and its op) came in 3, PREDICTIONS (and its op) in 4.
constexpr int StageSince(Stage stage) {
  return stage == Stage::kFeatures ? 3 : stage == Stage::kPredictions ? 4 : 2;
}
constexpr int OpSince(Op op) { return StageSince(GetOpInfo(op).to); }

// The stages a file of `version` can hold.
StageSet StagesOf(int version) {
  StageSet stages = StageSet::All();
  for (Stage stage : AllStages()) {
    if (StageSince(stage) > version) stages.Remove(stage);
  }
  return stages;
}

// A profile file's columns: id, then <stage>_bytes for every stage in stage
// table order, <op>_s for every op in op table order, then source_pixels, width, height
// crop_part and crop_reach; an older version lacks the columns of the stages and ops added since.
struct Column {
  enum Kind { kId, kBytes, kSeconds, kPixels, kWidth, kHeight, kCropPart, kCropReach } kind;
  int index;  // stage or op index
  std::string name;
};
const std::vector<Column>& Columns(int version) {
  static const auto* by_version = [] {
    auto* all = new std::vector<std::vector<Column>>(kVersion + 1);
    for (int v = kOldestVersion; v <= kVersion; ++v) {
      std::vector<Column>& c = (*all)[v];
      c.push_back({Column::kId, 0, "id"});
      for (const StageInfo& stage : kStageTable) {
        if (StageSince(stage.stage) > v) continue;
        c.push_back({Column::kBytes, StageIndex(stage.stage), absl::StrCat(stage.name, "_bytes")});
      }
      for (const OpInfo& op : kOpTable) {
        if (OpSince(op.op) > v) continue;
        c.push_back({Column::kSeconds, static_cast<int>(op.op), absl::StrCat(op.name, "_s")});
      }
      c.push_back({Column::kPixels, 0, "source_pixels"});
      if (v >= kCropColumnsSince) {
        c.push_back({Column::kWidth, 0, "width"});
        c.push_back({Column::kHeight, 0, "height"});
        c.push_back({Column::kCropPart, 0, "crop_part"});
        c.push_back({Column::kCropReach, 0, "crop_reach"});
      }
    }
    return all;
  }();
  return (*by_version)[version];
}
std::string HeaderLine(int version) {
  std::string out;
  for (const Column& c : Columns(version)) absl::StrAppend(&out, out.empty() ? "" : ",", c.name);
  return out;
}

// Dataset names are folder names and may hold spaces: keep [A-Za-z0-9._+-]
// and percent-encode every other byte so the metadata line stays one token
// per key.
std::string EncodeName(absl::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '+' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

std::optional<std::string> DecodeName(absl::string_view encoded) {
  std::string out;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] != '%') {
      out.push_back(encoded[i]);
      continue;
    }
    int byte = 0;
    if (i + 2 >= encoded.size()) return std::nullopt;
    if (!absl::SimpleHexAtoi(encoded.substr(i + 1, 2), &byte)) return std::nullopt;
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

struct Metadata {
  bool seen = false;
  std::optional<std::string> dataset;
  std::optional<uint64_t> fingerprint;
  std::optional<int> crop_size;
  double server_speed = 1.0;
  TimesSource times = TimesSource::kMeasured;
  StageSet stages = StageSet::All();
};

// "# dataset=NAME fingerprint=HEX crop_size=S server_speed=F times=measured".
// Unknown keys are ignored (newer writers may add some).
absl::Status ParseMetadata(absl::string_view comment, absl::string_view file, int line,
                           Metadata* meta) {
  meta->seen = true;
  for (absl::string_view token : absl::StrSplit(comment, ' ', absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos) {
      return csv::LineError(file, line, absl::StrCat("expected key=value, got '", token, "'"));
    }
    const absl::string_view key = token.substr(0, eq);
    const absl::string_view value = token.substr(eq + 1);
    if (key == "dataset") {
      meta->dataset = DecodeName(value);
      if (!meta->dataset) {
        return csv::LineError(file, line, absl::StrCat("bad dataset name '", value, "'"));
      }
    } else if (key == "fingerprint") {
      uint64_t fp = 0;
      if (value.empty() || value.size() > 16 || !absl::SimpleHexAtoi(value, &fp)) {
        return csv::LineError(file, line,
                              absl::StrCat("fingerprint must be hex digits, got '", value, "'"));
      }
      meta->fingerprint = fp;
    } else if (key == "crop_size") {
      int s = 0;
      if (!absl::SimpleAtoi(value, &s) || s <= 0) {
        return csv::LineError(
            file, line, absl::StrCat("crop_size must be a positive integer, got '", value, "'"));
      }
      meta->crop_size = s;
    } else if (key == "server_speed") {
      if (!csv::ParseDouble(value, &meta->server_speed) || meta->server_speed <= 0) {
        return csv::LineError(file, line,
                              absl::StrCat("server_speed must be > 0, got '", value, "'"));
      }
    } else if (key == "stages") {
      absl::StatusOr<StageSet> stages = ParseStageSet(value);
      if (!stages.ok()) return csv::LineError(file, line, stages.status().message());
      meta->stages = *stages;
    } else if (key == "times") {
      if (value == TimesSourceName(TimesSource::kMeasured)) {
        meta->times = TimesSource::kMeasured;
      } else if (value == TimesSourceName(TimesSource::kModel)) {
        meta->times = TimesSource::kModel;
      } else {
        return csv::LineError(file, line,
                              absl::StrCat("times must be measured or model, got '", value, "'"));
      }
    }
  }
  return absl::OkStatus();
}

// `stages`: those the file offers, whose sizes must be > 0.
absl::StatusOr<SampleProfile> ParseRow(absl::string_view text, absl::string_view file, int line,
                                       uint64_t expected_id, int version, StageSet stages) {
  const std::vector<Column>& columns = Columns(version);
  const std::vector<absl::string_view> f = csv::SplitFields(text, ',');
  if (f.size() != columns.size()) {
    return csv::LineError(file, line,
                          absl::StrCat("expected ", columns.size(), " fields, got ", f.size()));
  }
  SampleProfile s;
  for (size_t i = 0; i < columns.size(); ++i) {
    const Column& c = columns[i];
    switch (c.kind) {
      case Column::kId:
      case Column::kBytes:
      case Column::kPixels: {
        uint64_t* value = c.kind == Column::kId      ? &s.id
                          : c.kind == Column::kBytes ? &s.bytes.values[c.index]
                                                     : &s.source_pixels;
        if (!csv::ParseUint(f[i], value)) {
          return csv::LineError(file, line,
                                absl::StrCat(c.name, ": expected a non-negative integer, got '",
                                             f[i], "'"));
        }
        if (c.kind == Column::kBytes && *value == 0 && stages.Has(StageAt(c.index))) {
          return csv::LineError(file, line, absl::StrCat(c.name, " must be > 0"));
        }
        break;
      }
      case Column::kWidth:
      case Column::kHeight: {
        uint64_t side = 0;
        if (!csv::ParseUint(f[i], &side) || side > (1u << 30)) {
          return csv::LineError(file, line,
                                absl::StrCat(c.name, ": expected pixels in [0, 2^30], got '",
                                             f[i], "'"));
        }
        (c.kind == Column::kWidth ? s.width : s.height) = static_cast<uint32_t>(side);
        break;
      }
      case Column::kCropPart:
      case Column::kCropReach: {
        double* part = c.kind == Column::kCropPart ? &s.crop_part : &s.crop_reach;
        if (!csv::ParseDouble(f[i], part) || !(*part >= 0 && *part <= 1)) {
          return csv::LineError(file, line,
                                absl::StrCat(c.name, ": expected a part in [0, 1], got '", f[i],
                                             "'"));
        }
        break;
      }
      case Column::kSeconds: {
        double* seconds = &s.client.values[c.index];
        if (!csv::ParseDouble(f[i], seconds) || *seconds < 0) {
          return csv::LineError(
              file, line, absl::StrCat(c.name, ": expected seconds >= 0, got '", f[i], "'"));
        }
        break;
      }
    }
  }
  if (s.id != expected_id) {
    return csv::LineError(
        file, line, absl::StrCat("id ", s.id, " out of sequence (expected ", expected_id, ")"));
  }
  return s;
}

}  // namespace

std::string FingerprintHex(uint64_t fingerprint) { return absl::StrFormat("%016x", fingerprint); }

absl::StatusOr<DatasetProfile> ParseSophonProfile(absl::string_view text,
                                                  absl::string_view file_name) {
  const std::vector<csv::Line> lines = csv::SplitLines(text);
  if (lines.empty() || !absl::StartsWith(lines[0].text, kMagicPrefix)) {
    return csv::LineError(
        file_name, lines.empty() ? 1 : lines[0].number,
        absl::StrCat("not a Sophon profile (expected the first line '", kMagicPrefix, "v",
                     kVersion, "')"));
  }
  const absl::string_view magic = absl::StripAsciiWhitespace(lines[0].text);
  int version = 0;
  const absl::string_view tag = magic.substr(std::string_view(kMagicPrefix).size());
  if (!absl::StartsWith(tag, "v") || !absl::SimpleAtoi(tag.substr(1), &version) ||
      version < kOldestVersion || version > kVersion) {
    version = 0;
  }
  if (version == 0) {
    // FailedPrecondition: a valid profile of another version (smartoff
    // profiles the dataset again).
    return absl::FailedPreconditionError(absl::StrCat(
        file_name, ":", lines[0].number, ": unsupported profile version '", lines[0].text,
        "' (this build reads '", kMagicPrefix, "v", kOldestVersion, "' to '", kMagicPrefix, "v",
        kVersion, "')"));
  }
  Metadata meta;
  DatasetProfile profile;
  bool header_seen = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const csv::Line& line = lines[i];
    if (!header_seen) {
      if (absl::StartsWith(line.text, "#")) {
        absl::string_view comment = absl::StripAsciiWhitespace(line.text.substr(1));
        if (absl::StartsWith(comment, "dataset=")) {
          RETURN_IF_ERROR(ParseMetadata(comment, file_name, line.number, &meta));
        }
        continue;
      }
      if (absl::StripAsciiWhitespace(line.text) != HeaderLine(version)) {
        return csv::LineError(file_name, line.number,
                              absl::StrCat("expected the column header '", HeaderLine(version),
                                           "'"));
      }
      if (!meta.seen || !meta.dataset || !meta.fingerprint || !meta.crop_size) {
        return csv::LineError(
            file_name, line.number,
            "missing '# dataset=NAME fingerprint=HEX crop_size=S' line before the header");
      }
      // An older file never measured the stages added since.
      for (Stage stage : AllStages()) {
        if (!StagesOf(version).Has(stage)) meta.stages.Remove(stage);
      }
      header_seen = true;
      continue;
    }
    ASSIGN_OR_RETURN(SampleProfile s,
                     ParseRow(line.text, file_name, line.number, profile.samples.size(), version,
                              meta.stages));
    profile.samples.push_back(s);
  }
  if (!header_seen) {
    return csv::LineError(file_name, lines.back().number, "no column header line");
  }
  profile.dataset = *meta.dataset;
  profile.fingerprint = *meta.fingerprint;
  profile.crop_size = *meta.crop_size;
  profile.server_speed_factor = meta.server_speed;
  profile.times_source = meta.times;
  profile.stages = meta.stages;
  profile.times_detail = absl::StrCat(TimesSourceName(meta.times), " (", file_name, ")");
  if (absl::Status s = profile.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": ", s.message()));
  }
  return profile;
}

absl::StatusOr<DatasetProfile> ReadSophonProfile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, csv::ReadFile(path));
  return ParseSophonProfile(text, path);
}

absl::Status WriteSophonProfile(const DatasetProfile& profile, const std::string& path) {
  RETURN_IF_ERROR(profile.Validate());
  std::string text = absl::StrCat(kMagicPrefix, "v", kVersion, "\n");
  absl::StrAppendFormat(
      &text, "# dataset=%s fingerprint=%s crop_size=%d server_speed=%.6g times=%s stages=%s\n",
      EncodeName(profile.dataset), FingerprintHex(profile.fingerprint), profile.crop_size,
      profile.server_speed_factor, TimesSourceName(profile.times_source),
      StageSetNames(profile.stages));
  absl::StrAppend(&text,
                  "# units: *_bytes = payload bytes at that stage; *_s = thread CPU seconds of "
                  "the op on the training node; source_pixels = width*height of the encoded "
                  "image, width and height its sides (0 = unknown); crop_part = the part of "
                  "the image the profiled epoch's crop box kept, crop_reach = the part of its rows "
                  "down to the box's bottom (0 = unknown)\n",
                  HeaderLine(kVersion), "\n");
  for (const SampleProfile& s : profile.samples) {
    absl::StrAppend(&text, s.id);
    for (uint64_t bytes : s.bytes.values) absl::StrAppend(&text, ",", bytes);
    for (double seconds : s.client.values) absl::StrAppendFormat(&text, ",%.9g", seconds);
    absl::StrAppend(&text, ",", s.source_pixels, ",", s.width, ",", s.height);
    absl::StrAppendFormat(&text, ",%.6g,%.6g\n", s.crop_part, s.crop_reach);
  }
  // A temporary file of its own renamed into place: processes writing the
  // same profile at once (ranks of a node) never interleave.
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Open(path);
  if (!writer.ok()) return writer.status();
  RETURN_IF_ERROR((*writer)->Append(text.data(), text.size()));
  return (*writer)->Commit();
}

std::string DefaultProfileFolder(absl::string_view dataset) {
  return absl::StrCat("profiles/", dataset, "/");
}

absl::Status SaveProfileFolder(const DatasetProfile& profile, const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create profile folder ", folder, ": ", ec.message()));
  }
  return WriteSophonProfile(profile, (fs::path(folder) / kSampleProfileFile).string());
}

absl::StatusOr<DatasetProfile> LoadProfileFolder(const std::string& folder,
                                                 uint64_t expected_fingerprint) {
  const std::string path = (fs::path(folder) / kSampleProfileFile).string();
  absl::StatusOr<DatasetProfile> profile = ReadSophonProfile(path);
  if (absl::IsNotFound(profile.status())) {
    return absl::NotFoundError(
        absl::StrCat("profile folder ", folder, " holds no ", kSampleProfileFile));
  }
  if (!profile.ok()) return profile.status();
  if (profile->fingerprint != expected_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile ", path, " was taken on a different file list: its fingerprint is ",
                     FingerprintHex(profile->fingerprint), ", the dataset's is ",
                     FingerprintHex(expected_fingerprint),
                     " (profile again, or use the profile folder of this dataset)"));
  }
  return profile;
}

}  // namespace sophon
