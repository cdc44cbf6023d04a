// Conversions between the library's types and the sophon.v1 wire messages.
// Only this header (and the server/client) see generated protobuf types.
#ifndef SOPHON_WIRE_H_
#define SOPHON_WIRE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/augment.h"
#include "sophon/pipeline.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

v1::AugmentConfig ToProto(const AugmentOptions& options);
// Validates (AugmentOptions::Validate) what a peer sent.
absl::StatusOr<AugmentOptions> FromProto(const v1::AugmentConfig& config);

// Moves a payload into a wire sample (id and label are set by the caller).
void StageDataToProto(StageData data, v1::Sample* sample);
// Moves a wire sample's payload out, checking dtype, shape and size.
absl::StatusOr<StageData> StageDataFromProto(v1::Sample* sample);

// The error carried by a sample, or OK.
absl::Status SampleStatus(const v1::Sample& sample);
void SetSampleStatus(const absl::Status& status, v1::Sample* sample);

}  // namespace sophon

#endif  // SOPHON_WIRE_H_
