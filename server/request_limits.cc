#include "server/request_limits.h"

#include "absl/strings/str_cat.h"

namespace sophon {

absl::Status CheckUnaryRequestBytes(UnaryMethod method, int64_t bytes) {
  const UnaryMethodInfo& info = MethodInfo(method);
  if (bytes <= info.max_request_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      info.name, ": a request message of ", bytes, " bytes is over the server's limit for ",
      info.name, " requests (", info.max_request_bytes,
      " bytes: the request's fields and 1 KiB for fields a newer client adds)"));
}

}  // namespace sophon
