#include "sophon/planning/profile_loader.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sophon/base/csv.h"
#include "sophon/planning/original_profile.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<DatasetProfile> LoadOriginal(const std::string& sizes_path,
                                            const ProfileSource& source) {
  OriginalProfileOptions options;
  options.sizes_path = sizes_path;
  options.times_path = source.times_path;
  if (options.times_path.empty()) {
    const fs::path beside = fs::path(sizes_path).parent_path() / kOriginalTimesFile;
    std::error_code ec;
    if (fs::is_regular_file(beside, ec)) options.times_path = beside.string();
  }
  options.model = source.model;
  options.crop_size = source.crop_size;
  return ReadOriginalProfile(options);
}

}  // namespace

absl::StatusOr<DatasetProfile> LoadProfile(const ProfileSource& source) {
  if (!source.times_profile.empty()) {
    ProfileSource times_source;
    times_source.path = source.times_profile;
    ASSIGN_OR_RETURN(const DatasetProfile measured, LoadProfile(times_source));
    ProfileSource with_model = source;
    with_model.times_profile.clear();
    ASSIGN_OR_RETURN(with_model.model, FitTimesModel(measured));
    ASSIGN_OR_RETURN(DatasetProfile profile, LoadProfile(with_model));
    if (profile.times_source != TimesSource::kModel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileSource.times_profile: ", source.path, " has measured times of its own; the times of ",
          source.times_profile, " would not be used"));
    }
    return profile;
  }
  std::error_code ec;
  std::string file = source.path;
  if (fs::is_directory(source.path, ec)) {
    const fs::path sophon = fs::path(source.path) / kSampleProfileFile;
    const fs::path original = fs::path(source.path) / kOriginalSizesFile;
    if (fs::is_regular_file(sophon, ec)) {
      file = sophon.string();
    } else if (fs::is_regular_file(original, ec)) {
      file = original.string();
    } else {
      return absl::NotFoundError(absl::StrCat("profile folder ", source.path, " holds neither ",
                                              kSampleProfileFile, " nor ", kOriginalSizesFile));
    }
  }
  ASSIGN_OR_RETURN(const std::string text, csv::ReadFile(file));
  if (absl::StartsWith(text, "# sophon-profile")) {
    if (!source.times_path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileSource.times_path applies to original SOPHON profiles only; ", file, " carries its own times"));
    }
    return ParseSophonProfile(text, file);
  }
  return LoadOriginal(file, source);
}

}  // namespace sophon
