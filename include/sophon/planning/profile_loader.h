// Opens a profile given as a folder or a file, in either format Sophon reads:
// its own sample_profile.csv (profile_csv.h) or the original SOPHON
// prep_sizes.csv [+ prep_times.csv] (original_profile.h).
#ifndef SOPHON_PLANNING_PROFILE_LOADER_H_
#define SOPHON_PLANNING_PROFILE_LOADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/times_model.h"

namespace sophon {

struct ProfileSource {
  // A folder holding sample_profile.csv or prep_sizes.csv (the former wins),
  // or one of those files. A file is recognised by its first line.
  std::string path;
  // Original profiles only: prep_times.csv. Empty: the prep_times.csv beside
  // the sizes file if there is one, else times from `model`.
  std::string times_path;
  TimesModel model = DefaultTimesModel();  // original profiles without times
  // A profile with measured times (folder or file, as `path`) taken on this
  // kind of machine: its fitted TimesModel replaces `model`, i.e. its times
  // are carried over to a sizes-only profile, scaled by size. Empty: none.
  std::string times_profile;
  int crop_size = 0;  // original profiles: 0 infers S
};

// NotFound when the folder holds neither file; InvalidArgument for a
// times_path given with a Sophon profile (which carries its own times) or a
// times_profile given for a profile that has measured times.
absl::StatusOr<DatasetProfile> LoadProfile(const ProfileSource& source);

}  // namespace sophon

#endif  // SOPHON_PLANNING_PROFILE_LOADER_H_
