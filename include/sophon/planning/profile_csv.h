// Sophon's profile file format and the profile folder.
//
// sample_profile.csv, one header line, one metadata line, more '#' comment
// lines if any, the column header and one row per sample:
// # sophon-profile v2
// # dataset=NAME fingerprint=HEX16 crop_size=224 server_speed=1.0 times=measured stages=raw,jpeg_crop,cropped,flipped,tensor
// id,raw_bytes,jpeg_crop_bytes,cropped_bytes,flipped_bytes,tensor_bytes,jpeg_crop_s,decode_jpeg_crop_s,decode_crop_s,flip_s,tensor_s,source_pixels
// 0,462687,101203,150528,150528,602112,0.00301,0.00290,0.00412,0.000021,0.000310,786432
// The columns follow the tables of ops/stage.h: <stage>_bytes for every
// stage, <op>_s for every op. Units: *_bytes are payload bytes at that stage;
// *_s are thread CPU seconds of the op on the training node (jpeg_crop: RAW
// -> JPEG_CROP, decode_jpeg_crop: JPEG_CROP -> CROPPED, decode_crop: RAW ->
// CROPPED, flip: CROPPED -> FLIPPED, tensor: FLIPPED -> TENSOR); source_pixels
// is width * height of the encoded image (0 = unknown). fingerprint is
// SampleSource::fingerprint() of the file list the profile was taken on (0 =
// unknown); server_speed is the storage node's CPU seconds per training node
// CPU second; times is "measured" or "model"; stages are those a planner may
// choose (absent: all). Rows are in id order, ids 0..n-1. Version 1 files
// (before JPEG_CROP) are refused with a message: profile the dataset again.
#ifndef SOPHON_PLANNING_PROFILE_CSV_H_
#define SOPHON_PLANNING_PROFILE_CSV_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/planning/profile.h"

namespace sophon {

// File name of a Sophon profile inside a profile folder.
inline constexpr char kSampleProfileFile[] = "sample_profile.csv";

// Writes `profile` (validated first) to `path`, replacing it.
absl::Status WriteSophonProfile(const DatasetProfile& profile, const std::string& path);

// Parses a Sophon profile. InvalidArgument "PATH:LINE: ..." for a malformed
// line; FailedPrecondition for another version of the format; NotFound if the
// file is missing.
absl::StatusOr<DatasetProfile> ReadSophonProfile(const std::string& path);
absl::StatusOr<DatasetProfile> ParseSophonProfile(absl::string_view text,
                                                  absl::string_view file_name);

// "profiles/<dataset>/", the default profile folder of a dataset.
std::string DefaultProfileFolder(absl::string_view dataset);

// Writes folder/sample_profile.csv, creating the folder.
absl::Status SaveProfileFolder(const DatasetProfile& profile, const std::string& folder);

// Reads folder/sample_profile.csv and checks it was taken on the file list
// with `expected_fingerprint`: FailedPrecondition naming both fingerprints
// otherwise (a profile of unknown fingerprint is refused too). NotFound when
// the folder holds no profile.
absl::StatusOr<DatasetProfile> LoadProfileFolder(const std::string& folder,
                                                 uint64_t expected_fingerprint);

// 16 lowercase hex digits.
std::string FingerprintHex(uint64_t fingerprint);

}  // namespace sophon

#endif  // SOPHON_PLANNING_PROFILE_CSV_H_
