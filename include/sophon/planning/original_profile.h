// Reads the profile files of the original SOPHON system so its published
// profiles can be planned and compared.
//
// prep_sizes.csv (';'-separated, bytes, trailing ';' on every line):
//   index;raw;decoding;original_shape;RandomResizedCrop;RandomHorizontalFlip;ToTensor;Normalize;
//   0;462687;1886241;(1024, 614);150561;150561;602145;602145;
// original_shape is PIL's (width, height). The sizes are Python's
// sys.getsizeof of each op's output (33 bytes of object header included);
// they are taken as they are.
// prep_times.csv (','-separated, seconds, trailing ',' on every line):
//   index,loader,decoding,RandomResizedCrop,RandomHorizontalFlip,ToTensor,Normalize,
//
// Mapping onto Sophon's stages: raw -> RAW, RandomResizedCrop -> CROPPED,
// RandomHorizontalFlip -> FLIPPED, Normalize -> TENSOR; times: loader +
// decoding + RandomResizedCrop -> decode_crop, RandomHorizontalFlip -> flip,
// ToTensor + Normalize -> tensor. Columns are found by name, so their order
// may differ; extra columns are ignored.
#ifndef SOPHON_PLANNING_ORIGINAL_PROFILE_H_
#define SOPHON_PLANNING_ORIGINAL_PROFILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/planning/profile.h"
#include "sophon/planning/times_model.h"

namespace sophon {

inline constexpr char kOriginalSizesFile[] = "prep_sizes.csv";
inline constexpr char kOriginalTimesFile[] = "prep_times.csv";

struct OriginalProfileOptions {
  std::string sizes_path;  // prep_sizes.csv; required
  std::string times_path;  // prep_times.csv; empty: times from `model`
  // Used only without a times file: op times predicted from the sizes.
  TimesModel model = DefaultTimesModel();
  // Crop size S the profile was taken with; 0 infers it from the
  // RandomResizedCrop size of the first sample (S * S * 3 plus a small header).
  int crop_size = 0;
  std::string dataset;  // profile name; empty: the sizes file's folder name
};

// Reads an original SOPHON profile. The result has fingerprint 0 (those files
// carry none). Malformed lines: InvalidArgument "PATH:LINE: ..."; a times file
// whose rows do not match the sizes file: InvalidArgument naming both.
absl::StatusOr<DatasetProfile> ReadOriginalProfile(const OriginalProfileOptions& options);

// The parsers behind ReadOriginalProfile, over file contents (`file_name` is
// only for messages). ParseOriginalSizes leaves times at 0; ParseOriginalTimes
// fills the times of `profile`, whose samples it must match one to one.
absl::StatusOr<DatasetProfile> ParseOriginalSizes(absl::string_view text,
                                                  absl::string_view file_name, int crop_size);
absl::Status ParseOriginalTimes(absl::string_view text, absl::string_view file_name,
                                DatasetProfile* profile);

}  // namespace sophon

#endif  // SOPHON_PLANNING_ORIGINAL_PROFILE_H_
