#include "server/cli/load_backbone.h"

#include "absl/strings/str_cat.h"

#if SOPHON_BACKBONE
#include "sophon/model/backbone.h"
#endif

namespace sophon {

absl::StatusOr<std::shared_ptr<const FeatureExtractor>> LoadServerBackbone(
    const std::string& checkpoint, int threads) {
#if SOPHON_BACKBONE
  BackboneOptions options;
  options.checkpoint = checkpoint;
  options.threads = threads;
  absl::StatusOr<std::unique_ptr<Backbone>> backbone = Backbone::Load(options);
  if (!backbone.ok()) return backbone.status();
  return std::shared_ptr<const FeatureExtractor>(*std::move(backbone));
#else
  (void)threads;
  return absl::UnimplementedError(absl::StrCat(
      "cannot load the backbone ", checkpoint,
      ": this sophon-server was built without backbone support (configure with "
      "-DSOPHON_BACKBONE=ON, which needs LibTorch)"));
#endif
}

}  // namespace sophon
