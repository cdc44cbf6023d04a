// LoaderOptions checked in one place, and the servers checked against them
// (loader.h's free functions).
#include "client/loader/loader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/loader/batch_share.h"
#include "client/loader/server_manifest.h"
#include "client/loader/server_set.h"

namespace sophon {

absl::StatusOr<BadSamplePolicy> ParseBadSamplePolicy(absl::string_view name) {
  if (name == "skip") return BadSamplePolicy::kSkip;
  if (name == "fail") return BadSamplePolicy::kFail;
  return absl::InvalidArgumentError(
      absl::StrCat("bad-sample policy must be skip or fail, got '", name, "'"));
}

uint64_t BatchShareKey(const LoaderOptions& o, uint64_t dataset_fingerprint,
                       uint64_t served_models) {
  const AugmentOptions& a = o.pipeline.augment;
  const DecodeLimits& l = o.pipeline.limits;
  const FeatureExtractor* backbone = o.pipeline.backbone;
  // Doubles as their bits (%a): equal options, equal text.
  return StableDigest(absl::StrFormat(
      "batches v1 dataset=%016x seed=%d shuffle=%d window=%d rank=%d world=%d batch=%d "
      "drop_last=%d target=%s crop=%d scale=%a,%a ratio=%a,%a flip=%a eval_resize=%d "
      "limits=%d,%d,%d,%d,%d backbone=%016x,%016x served=%016x top_k=%d bad=%s",
      dataset_fingerprint, o.seed, o.shuffle, o.shuffle_window, o.rank, o.world, o.batch_size,
      o.drop_last, StageName(o.target), a.crop_size, a.scale_min, a.scale_max, a.ratio_min,
      a.ratio_max, a.flip_probability, a.eval_resize, l.max_pixels, l.max_memory_bytes,
      l.max_scans, l.max_scan_samples, l.lenient, backbone ? backbone->fingerprint() : 0,
      backbone ? backbone->head_fingerprint() : 0, served_models, o.pipeline.top_k,
      o.on_bad_sample == BadSamplePolicy::kSkip ? "skip" : "fail"));
}

absl::Status LoaderOptions::Validate() const {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoaderOptions.batch_size must be >= 1 (got ", batch_size, ")"));
  }
  if (workers < 1 || workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoaderOptions.workers must be in [1, 1024] (got ", workers, ")"));
  }
  if (shuffle_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.shuffle_window must be >= 0 (got ", shuffle_window, ")"));
  }
  if (prefetch_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.prefetch_batches must be >= 1 (got ", prefetch_batches, ")"));
  }
  if (requests_per_message < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.requests_per_message must be >= 1 (got ", requests_per_message, ")"));
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.rank must be in [0, world) (got rank ", rank, " of world ", world, ")"));
  }
  if (target != Stage::kTensor && GetStageInfo(target).layout != Layout::kVector &&
      GetStageInfo(target).layout != Layout::kHwc) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.target must be ", StageName(Stage::kTensor), ", ",
        StageName(Stage::kFeatures), ", ", StageName(Stage::kPredictions),
        " or a uint8 HWC stage (", StageName(Stage::kCropped), ", ", StageName(Stage::kFlipped),
        "), got ", StageName(target)));
  }
  if (target == Stage::kPredictions &&
      (pipeline.backbone == nullptr || pipeline.backbone->num_classes() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.target ", StageName(Stage::kPredictions),
        " needs this node's model (LoaderOptions.pipeline.backbone, with a head): it "
        "finishes samples that arrive earlier and checks the servers' models against it"));
  }
  if (pipeline.top_k < 1 || pipeline.top_k > kMaxTopK) {
    return absl::InvalidArgumentError(absl::StrCat("LoaderOptions.pipeline.top_k must be in [1, ",
                                                   kMaxTopK, "] (got ", pipeline.top_k, ")"));
  }
  if (feature_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.feature_cache_bytes must be >= 0 (got ", feature_cache_bytes, ")"));
  }
  if (feature_cache_bytes > 0 &&
      (target != Stage::kFeatures || pipeline.augment.eval_resize <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.feature_cache_bytes needs a ", StageName(Stage::kFeatures),
        " target with the evaluation transform (augment none): with random crops and flips a "
        "sample's features change every epoch (target ",
        StageName(target), ", eval_resize ", pipeline.augment.eval_resize, ")"));
  }
  if (absl::Status s = pipeline.augment.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("LoaderOptions.pipeline.augment: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckJpegDecodingAgrees(const ServerManifest& manifest, absl::string_view address,
                                     const DecodeLimits& limits) {
  if (manifest.lenient_jpeg == limits.lenient) return absl::OkStatus();
  const auto describe = [](bool lenient) {
    return lenient ? "leniently (accepting corrupt-data warnings)" : "strictly";
  };
  return absl::FailedPreconditionError(absl::StrCat(
      "storage server ", address, " decodes JPEGs ", describe(manifest.lenient_jpeg),
      " but this training node ", describe(limits.lenient),
      " (LoaderOptions.pipeline.limits.lenient): a sample with corrupt data would succeed on "
      "one side and fail on the other, so batches would depend on where each sample is "
      "decoded. Give both or neither of sophon-server --lenient-jpeg and sophon-train "
      "--lenient-jpeg (the server is ",
      manifest.lenient_jpeg ? "lenient" : "strict", ", this node ",
      limits.lenient ? "lenient" : "strict", ")"));
}

absl::StatusOr<int> CheckFeatureSources(const ServerSet& servers,
                                        const FeatureExtractor* local) {
  const ServerManifest* first = nullptr;  // the first server with a backbone
  std::string first_address;
  for (int i = 0; i < servers.size(); ++i) {
    const ServerManifest& m = servers.client(i)->manifest();
    const std::string address = servers.address(i);
    if (m.feature_size == 0) {
      if (local != nullptr) continue;  // its samples come at TENSOR, finished here
      return absl::FailedPreconditionError(absl::StrCat(
          "the job's last stage is ", StageName(Stage::kFeatures), ", but storage server ",
          address, " has no backbone and neither has this node (LoaderOptions.pipeline.backbone): "
          "start the server with --backbone=CHECKPOINT, or give this node the same checkpoint"));
    }
    if (local != nullptr) {
      if (m.backbone_fingerprint != local->fingerprint()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "storage server ", address, " extracts features with ", m.backbone,
            " and this node with ", local->description(),
            ": their checkpoints differ (fingerprints ", absl::Hex(m.backbone_fingerprint), " and ",
            absl::Hex(local->fingerprint()), "), so a sample's features would depend on where "
            "they were computed; give both the same checkpoint file"));
      }
      continue;
    }
    if (first == nullptr) {
      first = &m;
      first_address = address;
    } else if (m.backbone_fingerprint != first->backbone_fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "storage servers ", first_address, " (", first->backbone, ") and ", address, " (",
          m.backbone, ") extract features with different checkpoints; give every server the same "
          "--backbone file"));
    }
  }
  return local != nullptr ? local->feature_size() : static_cast<int>(first->feature_size);
}

Stage ServedStage(const ServerManifest& manifest, const FeatureExtractor* local) {
  if (manifest.feature_size == 0) return Stage::kTensor;
  if (local != nullptr && (manifest.backbone_fingerprint != local->fingerprint() ||
                           manifest.head_fingerprint != local->head_fingerprint() ||
                           static_cast<int>(manifest.head_classes) != local->num_classes())) {
    return manifest.backbone_fingerprint == local->fingerprint() ? Stage::kFeatures
                                                                 : Stage::kTensor;
  }
  return kLastStage;
}

}  // namespace sophon
