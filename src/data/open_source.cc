#include "sophon/data/open_source.h"

#include "sophon/data/pack_index.h"
#include "sophon/data/pack_source.h"

namespace sophon {

absl::StatusOr<std::unique_ptr<SampleSource>> OpenSampleSource(const std::string& path,
                                                               const ImageFolderOptions& options,
                                                               const PackSourceOptions& pack) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (IsPackFolder(path)) {
    PackSourceOptions with_cap = pack;
    with_cap.max_sample_bytes = options.max_file_bytes;
    with_cap.follow_symlinks = options.follow_symlinks;
    absl::StatusOr<std::unique_ptr<PackSource>> source = PackSource::Open(path, with_cap);
    if (!source.ok()) return source.status();
    return std::unique_ptr<SampleSource>(*std::move(source));
  }
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> source =
      ImageFolderSource::Open(path, options);
  if (!source.ok()) return source.status();
  return std::unique_ptr<SampleSource>(*std::move(source));
}

}  // namespace sophon
