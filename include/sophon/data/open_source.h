// Opening the sample source a path names: a pack folder (one that holds
// sophon-pack.idx, pack_source.h) or an ImageFolder tree (image_folder.h).
// The programs and tools that take --data open it here, so each of them
// serves or reads either kind.
#ifndef SOPHON_DATA_OPEN_SOURCE_H_
#define SOPHON_DATA_OPEN_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sophon/data/image_folder.h"
#include "sophon/data/pack_source.h"
#include "sophon/data/sample_source.h"

namespace sophon {

// A PackSource with `pack` when `path` holds a pack index (its
// max_sample_bytes replaced by options.max_file_bytes, the one size cap of
// both kinds, and its follow_symlinks by options.follow_symlinks, the one
// link policy of both), else an ImageFolderSource with `options`.
absl::StatusOr<std::unique_ptr<SampleSource>> OpenSampleSource(
    const std::string& path, const ImageFolderOptions& options = {},
    const PackSourceOptions& pack = {});

}  // namespace sophon

#endif  // SOPHON_DATA_OPEN_SOURCE_H_
