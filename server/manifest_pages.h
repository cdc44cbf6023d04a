// The manifest as a storage node sends it, encoded once when the service
// starts: the header (GetManifest: name, fingerprint, counts, class names,
// the server's settings, and the first page) and pages of labels and raw
// sizes (GetManifestPage), each at most `page_bytes` encoded, so that no
// reply is hundreds of MB. Answers are slices of these buffers: a thousand
// clients asking, or a client that never reads its answers, cost no copy,
// and a request can make the server allocate nothing.
#ifndef SOPHON_SERVER_MANIFEST_PAGES_H_
#define SOPHON_SERVER_MANIFEST_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/data/sample_source.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

// The most bytes a page spends besides its samples (fingerprint, start and
// the three packed fields' tags and lengths), and the most one sample takes
// (a label and a size as varints, a fixed32 version): a page of page_bytes
// holds at least one.
inline constexpr int64_t kManifestPageOverheadBytes = 40;
inline constexpr int64_t kManifestSampleMaxBytes = 19;
inline constexpr int64_t kMinManifestPageBytes = 64;
// Ids one GetRelativePaths request may name (an answer is at most about 16
// x 2 KiB, for the longest escaped paths).
inline constexpr int kMaxRelativePathsPerRequest = 16;

class ManifestPages {
 public:
  // `settings` holds the header's fields that are the server's, not the
  // source's (prep_workers, cpu_limit, lenient_jpeg). REQUIRES: page_bytes >=
  // kMinManifestPageBytes. Immutable afterwards; thread-safe.
  ManifestPages(const SampleSource& source, const v1::Manifest& settings, int64_t page_bytes);

  // The encoded v1::Manifest: header and first page.
  const std::string& header() const { return header_; }
  // The encoded v1::ManifestPage holding sample `request.start`, valid as
  // long as this object. FAILED_PRECONDITION when request.fingerprint is not
  // this manifest's (the client read another dataset's header: this server
  // restarted with other data), OUT_OF_RANGE for a start outside the
  // manifest; messages name both values.
  absl::StatusOr<absl::string_view> Page(const v1::GetManifestPageRequest& request) const;

  size_t num_pages() const { return page_starts_.size(); }
  uint64_t num_samples() const { return num_samples_; }
  uint64_t fingerprint() const { return fingerprint_; }
  // Bytes held: the header and every page, encoded.
  size_t memory_bytes() const;

 private:
  uint64_t fingerprint_ = 0;
  uint64_t num_samples_ = 0;
  std::string header_;
  std::string pages_;                  // every encoded page, back to back
  std::vector<uint64_t> page_starts_;  // first sample of each page, ascending
  std::vector<size_t> page_ends_;      // page k is pages_[page_ends_[k-1], page_ends_[k])
};

// Fills `response` with the relative paths of `request.ids` in `source`.
// FAILED_PRECONDITION for another fingerprint, INVALID_ARGUMENT for more
// than kMaxRelativePathsPerRequest ids, OUT_OF_RANGE for an id outside the
// manifest; messages name the value.
absl::Status RelativePathsOf(const SampleSource& source,
                             const v1::GetRelativePathsRequest& request,
                             v1::RelativePaths* response);

}  // namespace sophon

#endif  // SOPHON_SERVER_MANIFEST_PAGES_H_
