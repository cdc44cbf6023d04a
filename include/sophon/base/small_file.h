// Reading a small configuration file (a key, a certificate, a token) whole,
// with a size cap, so that a wrong path (a device, a huge file) fails fast.
#ifndef SOPHON_BASE_SMALL_FILE_H_
#define SOPHON_BASE_SMALL_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

// The bytes of `path`. Errors start with `option` (the option that named the
// file) and name the path: NotFound, PermissionDenied, or InvalidArgument
// (unreadable, or larger than max_bytes; `what` says what the file should
// hold, e.g. "a PEM file").
absl::StatusOr<std::string> ReadSmallFile(absl::string_view option, const std::string& path,
                                          int64_t max_bytes, absl::string_view what);

}  // namespace sophon

#endif  // SOPHON_BASE_SMALL_FILE_H_
