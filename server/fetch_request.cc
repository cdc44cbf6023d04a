#include "server/fetch_request.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sophon/net/wire.h"

namespace sophon {

int64_t SampleOutputBytes(Stage stage, const PipelineOptions& pipeline, const SampleSource& source,
                          uint64_t id) {
  if (GetStageInfo(stage).layout == Layout::kVector) {
    return static_cast<int64_t>(VectorElements(stage, pipeline)) *
           DTypeBytes(GetStageInfo(stage).dtype);
  }
  const int64_t bytes = StagePayloadBytes(stage, pipeline.augment.crop_size);
  if (bytes >= 0) return bytes;
  const uint64_t raw = std::min(source.manifest().raw_size(id), source.max_sample_bytes());
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
  if (request.augment().crop_size() < 1) {
    *limit = Limit::kInvalidRequest;
    return absl::InvalidArgumentError(
        absl::StrCat("crop size ", request.augment().crop_size(),
                     " is not in [1, ", options.max_crop_size,
                     "] (the server's max_crop_size limit)"));
  }
  absl::StatusOr<AugmentOptions> augment = FromProto(request.augment());
  if (!augment.ok()) {
    *limit = Limit::kInvalidRequest;
    return absl::InvalidArgumentError(
        absl::StrCat("bad augmentation parameters: ", augment.status().message()));
  }
  if (request.top_k() > static_cast<uint32_t>(kMaxTopK)) {
    *limit = Limit::kInvalidRequest;
    return absl::InvalidArgumentError(
        absl::StrCat("top_k ", request.top_k(), " is not in [0, ", kMaxTopK, "]"));
  }
  auto pipeline = std::make_shared<PipelineOptions>();
  pipeline->augment = *augment;
  if (request.top_k() > 0) pipeline->top_k = static_cast<int>(request.top_k());
  pipeline->limits = options.limits;
  pipeline->backbone = options.backbone.get();

  CheckedRequest out;
  out.seed = request.seed();
  out.epoch = request.epoch();
  out.key_offset = request.key_offset();
  out.samples.reserve(request.samples_size());
  for (const v1::SampleRequest& sr : request.samples()) {
    CheckedSample& s = out.samples.emplace_back();
    s.id = sr.id();
    s.wire_stage = static_cast<int32_t>(sr.target_stage());
    if (sr.id() >= source.size()) {
      s.refusal = SampleRefusal::kOutOfRange;
      continue;
    }
    const absl::StatusOr<Stage> stage = StageFromProto(sr.target_stage());
    if (!stage.ok()) {
      s.refusal = SampleRefusal::kUnknownStage;
      continue;
    }
    s.stage = *stage;
    if (s.stage >= Stage::kFeatures && pipeline->backbone == nullptr) {
      s.refusal = SampleRefusal::kNoBackbone;
      continue;
    }
    s.bytes = SampleOutputBytes(s.stage, *pipeline, source, sr.id());
    if (s.bytes > options.max_stream_inflight_bytes) s.refusal = SampleRefusal::kTooLarge;
  }
  out.pipeline = std::move(pipeline);
  return out;
}

absl::Status SampleError(const CheckedSample& s, const SampleSource& source,
                         const ServiceOptions& options) {
  switch (s.refusal) {
    case SampleRefusal::kNone:
      break;
    case SampleRefusal::kOutOfRange:
      return absl::OutOfRangeError(absl::StrCat("sample ", s.id, " is outside the manifest of ",
                                                source.size(), " samples"));
    case SampleRefusal::kUnknownStage:
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", s.id, ": unknown target stage ", s.wire_stage));
    case SampleRefusal::kNoBackbone:
      return absl::FailedPreconditionError(absl::StrCat(
          "sample ", s.id, ": stage ", StageName(s.stage),
          " needs a backbone, and this server has none (start sophon-server with "
          "--backbone=CHECKPOINT, or ask for an earlier stage)"));
    case SampleRefusal::kTooLarge:
      return absl::ResourceExhaustedError(absl::StrCat(
          "sample ", s.id, " (", source.manifest().relative_path(s.id), ") at stage ",
          StageName(s.stage), " would take ", s.bytes,
          " bytes, over the server's max_stream_inflight_bytes limit (",
          options.max_stream_inflight_bytes, ")"));
  }
  return absl::InternalError(absl::StrCat("sample ", s.id, " was not refused"));
}

}  // namespace sophon
