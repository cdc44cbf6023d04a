// Reading a storage server's manifest in pages (sophon.proto: GetManifest for
// the header and first page, GetManifestPage for the rest) into the compact
// ServerManifest, checking that the pages make one manifest.
#ifndef SOPHON_CLIENT_LOADER_MANIFEST_READER_H_
#define SOPHON_CLIENT_LOADER_MANIFEST_READER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/loader/server_manifest.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

// The two calls that read a manifest. SampleClient makes them over its
// channel (deadlines, retries while the server is unreachable); tests make
// them over anything.
class ManifestRpcs {
 public:
  virtual ~ManifestRpcs() = default;
  virtual absl::Status GetManifest(v1::Manifest* header) = 0;
  virtual absl::Status GetManifestPage(const v1::GetManifestPageRequest& request,
                                       v1::ManifestPage* page) = 0;
};

// Reads the manifest of the server at `address` (for messages): the header,
// then a page at a time from the first sample it lacks, until it has the
// header's num_samples. Checks each page: it belongs to the header's
// fingerprint, holds the sample asked for, has as many sizes as labels,
// names only the header's classes, and ends within num_samples. Errors name
// the address: FAILED_PRECONDITION when a page is of another fingerprint (the
// server restarted with other data while it was read; the server itself
// refuses such a request the same way), DATA_LOSS for a malformed header or
// page; an RPC's own error is returned as it came.
absl::StatusOr<ServerManifest> ReadManifest(ManifestRpcs& rpcs, absl::string_view address);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_MANIFEST_READER_H_
