// Page-cache control for a dataset's files, like vmtouch: evict them
// (posix_fadvise POSIX_FADV_DONTNEED), read them in (warm), and measure how
// much of them is resident (mmap + mincore). Experiments use this to start
// cold, or fully cached, on purpose.
//
// Linux semantics: eviction drops clean pages only (files are fdatasync'ed
// first), pages mapped by another process stay, and on some filesystems
// (tmpfs, some network or overlay filesystems) eviction has no effect.
#ifndef SOPHON_DATA_PAGE_CACHE_H_
#define SOPHON_DATA_PAGE_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sophon {

class SampleSource;

struct CacheResidency {
  uint64_t files = 0;
  uint64_t bytes = 0;           // total size of the files
  uint64_t pages = 0;           // pages spanned by the files
  uint64_t resident_pages = 0;  // of those, in the page cache
  uint64_t page_size = 0;

  // Fraction of pages resident, 0 for no pages.
  double fraction() const { return pages ? static_cast<double>(resident_pages) / pages : 0.0; }
  // Resident bytes (resident pages x page size, capped at bytes).
  uint64_t resident_bytes() const;
};

// Resident pages of `paths`. Errors name the file that could not be opened,
// mapped or queried.
absl::StatusOr<CacheResidency> MeasureResidency(const std::vector<std::string>& paths);

// Asks the kernel to drop `paths` from the page cache. Returns the residency
// measured afterwards.
absl::StatusOr<CacheResidency> EvictFromPageCache(const std::vector<std::string>& paths);

// Reads every byte of `paths` so that they are in the page cache (if memory
// allows). Returns the residency measured afterwards.
absl::StatusOr<CacheResidency> WarmPageCache(const std::vector<std::string>& paths);

// The files that hold `source`'s samples (SampleSource::FilePaths): for an
// ImageFolder, every sample file in manifest order.
std::vector<std::string> DatasetFilePaths(const SampleSource& source);

// "1234 files, 56.7 MB, 12.3 MB resident (21.7%)".
std::string FormatResidency(const CacheResidency& residency);

}  // namespace sophon

#endif  // SOPHON_DATA_PAGE_CACHE_H_
