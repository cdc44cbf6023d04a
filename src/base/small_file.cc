#include "sophon/base/small_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace sophon {

absl::StatusOr<std::string> ReadSmallFile(absl::string_view option, const std::string& path,
                                          int64_t max_bytes, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string message =
        absl::StrCat(option, ": cannot read '", path, "': ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    if (err == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  std::string bytes(static_cast<size_t>(max_bytes) + 1, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": cannot read '", path, "': ", std::strerror(errno)));
  }
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(bytes.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": '", path, "' is larger than ",
                                                   max_bytes, " bytes; it should be ", what));
  }
  return bytes;
}

}  // namespace sophon
