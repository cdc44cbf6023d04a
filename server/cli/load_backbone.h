// The storage node's frozen backbone, loaded for sophon-server --backbone.
// Built into the sophon-server program only (never into the sophon_server
// library, which the Python module links without LibTorch): with
// -DSOPHON_BACKBONE=ON it loads a checkpoint through sophon_torch's Backbone;
// without, it refuses, so a storage node can be built without LibTorch.
#ifndef SOPHON_SERVER_CLI_LOAD_BACKBONE_H_
#define SOPHON_SERVER_CLI_LOAD_BACKBONE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sophon/ops/feature_extractor.h"

namespace sophon {

// The backbone of `checkpoint` (written by sophon-train --save), its forward
// passes on `threads` intra-op threads (0 = LibTorch's default).
// Unimplemented when this program was built without backbone support.
absl::StatusOr<std::shared_ptr<const FeatureExtractor>> LoadServerBackbone(
    const std::string& checkpoint, int threads);

}  // namespace sophon

#endif  // SOPHON_SERVER_CLI_LOAD_BACKBONE_H_
