// Which symbolic links a sample source follows among the files under its
// root: an image folder's class directories and samples, a pack's index and
// shards (ImageFolderOptions.follow_symlinks, PackSourceOptions.follow_symlinks).
#ifndef SOPHON_DATA_FOLLOW_SYMLINKS_H_
#define SOPHON_DATA_FOLLOW_SYMLINKS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

enum class FollowSymlinks {
  kInside,  // only those whose target lies inside the root
  kAll,     // any
};

// "inside" or "all"; InvalidArgument naming ImageFolderOptions.follow_symlinks.
absl::StatusOr<FollowSymlinks> ParseFollowSymlinks(absl::string_view text);

}  // namespace sophon

#endif  // SOPHON_DATA_FOLLOW_SYMLINKS_H_
