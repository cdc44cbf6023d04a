// Conversions between the library's types and the sophon.v1 wire messages.
// Only this header (and the server/client) see generated protobuf types.
#ifndef SOPHON_NET_WIRE_H_
#define SOPHON_NET_WIRE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/ops/augment.h"
#include "sophon/ops/stage.h"
#include "sophon/ops/pipeline.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

v1::AugmentConfig ToProto(const AugmentOptions& options);
// Validates (AugmentOptions::Validate) what a peer sent.
absl::StatusOr<AugmentOptions> FromProto(const v1::AugmentConfig& config);

// A stage's wire value, and back (InvalidArgument for a value no stage has).
v1::Stage StageToProto(Stage stage);
absl::StatusOr<Stage> StageFromProto(int wire_stage);

// The count of `stage` in ServerStats.samples_by_stage / bytes_by_stage
// (indexed by wire value); 0 where the list is short.
uint64_t StatsSamplesAt(const v1::ServerStats& stats, Stage stage);
uint64_t StatsBytesAt(const v1::ServerStats& stats, Stage stage);

// Moves a payload into a wire sample (id and label are set by the caller).
void StageDataToProto(StageData data, v1::Sample* sample);
// Moves a wire sample's payload out, checking dtype, shape and size.
absl::StatusOr<StageData> StageDataFromProto(v1::Sample* sample);

// The one way requests are built: each message carries the epoch, the seed
// and the augmentation (the server needs them with every message), then the
// samples added since the last Take().
class FetchRequestBuilder {
 public:
  // `key_offset`: added to each id to key its augmentation
  // (FetchRequest.key_offset). The request carries pipeline's augmentation
  // and top_k.
  FetchRequestBuilder(uint64_t epoch, uint64_t seed, const PipelineOptions& pipeline,
                      uint64_t key_offset = 0);
  // With PipelineOptions' default top_k.
  FetchRequestBuilder(uint64_t epoch, uint64_t seed, const AugmentOptions& augment,
                      uint64_t key_offset = 0)
      : FetchRequestBuilder(epoch, seed, PipelineOptions{augment}, key_offset) {}
  void Add(uint64_t id, Stage target_stage);
  int size() const { return request_.samples_size(); }  // samples in the current message
  // The current message; the builder starts the next one.
  v1::FetchRequest Take();

 private:
  void Reset();

  const uint64_t epoch_;
  const uint64_t seed_;
  const uint64_t key_offset_;
  const int top_k_;
  const v1::AugmentConfig augment_;
  v1::FetchRequest request_;
};

// The error carried by a sample, or OK.
absl::Status SampleStatus(const v1::Sample& sample);
void SetSampleStatus(const absl::Status& status, v1::Sample* sample);

}  // namespace sophon

#endif  // SOPHON_NET_WIRE_H_
