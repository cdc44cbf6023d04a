// Checking one FetchRequest message against the dataset and the server's
// limits before anything is allocated for it: what each sample asks for and
// how many output bytes it will hold while in flight. No gRPC types, so the
// fuzz target and unit tests drive it directly.
#ifndef SOPHON_SERVER_FETCH_REQUEST_H_
#define SOPHON_SERVER_FETCH_REQUEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/limit.h"
#include "server/service_options.h"
#include "sophon/data/sample_source.h"
#include "sophon/ops/pipeline.h"
#include "sophon/ops/stage.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {


// Why a sample of an accepted message is answered with an error instead of
// being prepared. Kept as a code, not a status, so that a pending message of
// max_ids_per_request bad ids costs 32 bytes an id (the message is built when
// the sample is answered).
enum class SampleRefusal : uint8_t {
  kNone = 0,
  kOutOfRange,    // the id is outside the manifest
  kUnknownStage,  // the target stage is not one this server knows
  kTooLarge,      // the sample alone is over max_stream_inflight_bytes
  kNoBackbone,    // FEATURES asked of a server without a backbone
};

struct CheckedSample {
  uint64_t id = 0;
  int64_t bytes = 0;  // output bytes reserved while in flight
  Stage stage = Stage::kRaw;
  SampleRefusal refusal = SampleRefusal::kNone;  // if set, answered with SampleError
  int32_t wire_stage = 0;                        // the stage as asked, for the error
};
static_assert(sizeof(CheckedSample) <= 32, "pending samples are held per stream: keep them small");

// The error a refused sample is answered with, naming the id, the path and
// the limit. REQUIRES: s.refusal != kNone.
absl::Status SampleError(const CheckedSample& s, const SampleSource& source,
                         const ServiceOptions& options);

struct CheckedRequest {
  std::shared_ptr<const PipelineOptions> pipeline;  // shared by the message's samples
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t key_offset = 0;  // the augmentation of sample id is keyed by key_offset + id
  std::vector<CheckedSample> samples;
};

// A request refused as a whole: the stream ends with `status`.
struct RequestRejection {
  absl::Status status;
  Limit limit = Limit::kInvalidRequest;
};

// Parses one encoded FetchRequest. INVALID_ARGUMENT if the bytes are not a
// FetchRequest; RESOURCE_EXHAUSTED over max_request_bytes.
absl::Status ParseFetchRequest(const std::string& bytes, const ServiceOptions& options,
                               v1::FetchRequest* request, Limit* limit);

// Checks a whole message: augmentation parameters, crop size, number of ids.
// Problems of one sample (an id outside the manifest, an unknown stage, a
// sample larger than a stream may hold) do not refuse the message: the
// sample carries its error and the others are served.
absl::StatusOr<CheckedRequest> CheckFetchRequest(const v1::FetchRequest& request,
                                                 const SampleSource& source,
                                                 const ServiceOptions& options, Limit* limit);

// Output bytes of sample `id` of `source` at `stage` under `pipeline` (its
// crop size and backbone): for RAW its manifest size, capped at what the
// source can return (a larger file fails when read, with the source's own
// error); for FEATURES the backbone's feature vector; the payload size
// otherwise.
int64_t SampleOutputBytes(Stage stage, const PipelineOptions& pipeline, const SampleSource& source,
                          uint64_t id);

}  // namespace sophon

#endif  // SOPHON_SERVER_FETCH_REQUEST_H_
