// Bearer tokens for the "tls" credentials kind: reading the token file, and
// the server's check of "authorization: Bearer <token>" on every call.
#ifndef SOPHON_NET_BEARER_TOKEN_H_
#define SOPHON_NET_BEARER_TOKEN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class AuthMetadataProcessor;
}  // namespace grpc

namespace sophon {

// The token in the file at `path`, surrounding whitespace trimmed. Errors
// name `option` (e.g. "CredentialsOptions.auth_token_file") and the file:
// NotFound / PermissionDenied / InvalidArgument when it cannot be read, is
// empty, or holds characters other than printable ASCII without spaces (what
// an HTTP header value may carry).
absl::StatusOr<std::string> ReadBearerToken(absl::string_view option, const std::string& path);

// a == b in a time that depends only on the length of `presented`, never on
// where the first difference lies or on the secret's contents.
bool TokenEquals(absl::string_view presented, absl::string_view secret);

// Checks "authorization: Bearer <token>" on every call against `token`
// (non-empty). A call without it, or with another token, fails with
// UNAUTHENTICATED saying which; rejections are logged (rate-limited), the
// token never. Attach only to secure server credentials: gRPC aborts when a
// processor is set on insecure ones.
std::shared_ptr<grpc::AuthMetadataProcessor> MakeBearerTokenProcessor(std::string token);

}  // namespace sophon

#endif  // SOPHON_NET_BEARER_TOKEN_H_
