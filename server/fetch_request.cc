#include "server/fetch_request.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sophon/net/wire.h"

namespace sophon {

int64_t SampleOutputBytes(Stage stage, int crop_size, const SampleSource& source, uint64_t id) {
  const int64_t bytes = StagePayloadBytes(stage, crop_size);
  if (bytes >= 0) return bytes;
  const uint64_t raw = std::min(source.entry(id).raw_size, source.max_sample_bytes());
  return static_cast<int64_t>(std::min<uint64_t>(raw, INT64_MAX));
}

absl::Status ParseFetchRequest(const std::string& bytes, const ServiceOptions& options,
                               v1::FetchRequest* request, Limit* limit) {
  if (static_cast<int64_t>(bytes.size()) > options.max_request_bytes) {
    *limit = Limit::kMaxRequestBytes;
    return absl::ResourceExhaustedError(
        absl::StrCat("a request message of ", bytes.size(),
                     " bytes is over the server's max_request_bytes limit (",
                     options.max_request_bytes, ")"));
  }
  if (!request->ParseFromString(bytes)) {
    *limit = Limit::kInvalidRequest;
    return absl::InvalidArgumentError(absl::StrCat(
        "a request message of ", bytes.size(), " bytes is not a valid sophon.v1.FetchRequest"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckedRequest> CheckFetchRequest(const v1::FetchRequest& request,
                                                 const SampleSource& source,
                                                 const ServiceOptions& options, Limit* limit) {
  if (request.samples_size() > options.max_ids_per_request) {
    *limit = Limit::kMaxIdsPerRequest;
    return absl::ResourceExhaustedError(
        absl::StrCat("a request names ", request.samples_size(),
                     " samples, over the server's max_ids_per_request limit (",
                     options.max_ids_per_request, ")"));
  }
  if (request.augment().crop_size() > static_cast<uint32_t>(options.max_crop_size)) {
    *limit = Limit::kMaxCropSize;
    return absl::InvalidArgumentError(
        absl::StrCat("crop size ", request.augment().crop_size(),
                     " is over the server's max_crop_size limit (", options.max_crop_size, ")"));
  }
  absl::StatusOr<AugmentOptions> augment = FromProto(request.augment());
  if (!augment.ok()) {
    *limit = Limit::kInvalidRequest;
    return absl::InvalidArgumentError(
        absl::StrCat("bad augmentation parameters: ", augment.status().message()));
  }
  auto pipeline = std::make_shared<PipelineOptions>();
  pipeline->augment = *augment;
  pipeline->limits = options.limits;

  CheckedRequest out;
  out.seed = request.seed();
  out.epoch = request.epoch();
  out.samples.reserve(request.samples_size());
  for (const v1::SampleRequest& sr : request.samples()) {
    CheckedSample& s = out.samples.emplace_back();
    s.id = sr.id();
    if (sr.id() >= source.size()) {
      s.error = absl::OutOfRangeError(absl::StrCat(
          "sample ", sr.id(), " is outside the manifest of ", source.size(), " samples"));
      continue;
    }
    const absl::StatusOr<Stage> stage = StageFromProto(sr.target_stage());
    if (!stage.ok()) {
      s.error = absl::InvalidArgumentError(
          absl::StrCat("sample ", sr.id(), ": unknown target stage ", sr.target_stage()));
      continue;
    }
    s.stage = *stage;
    s.bytes = SampleOutputBytes(s.stage, pipeline->augment.crop_size, source, sr.id());
    if (s.bytes > options.max_stream_inflight_bytes) {
      s.error = absl::ResourceExhaustedError(absl::StrCat(
          "sample ", sr.id(), " (", source.entry(sr.id()).relative_path, ") at stage ", StageName(s.stage), " would take ", s.bytes,
          " bytes, over the server's max_stream_inflight_bytes limit (",
          options.max_stream_inflight_bytes, ")"));
    }
  }
  out.pipeline = std::move(pipeline);
  return out;
}

}  // namespace sophon
