// The "tls" credentials kind (sophon/net/credentials.h): TLS with the
// server's certificate, mutual TLS when the server has a client CA, and an
// optional bearer token checked on every call (sophon/net/bearer_token.h).
#ifndef SOPHON_NET_TLS_CREDENTIALS_H_
#define SOPHON_NET_TLS_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/net/credentials.h"

namespace sophon {

// The factory that the credentials registry installs as "tls". Its functions
// expect options that passed Validate for their side; they read the PEM
// files and the token file, and their errors name the option and the file.
CredentialsFactory TlsCredentialsFactory();

// The PEM text of the file at `path` for option `option`: NotFound /
// PermissionDenied naming both when it cannot be read, InvalidArgument when
// it does not hold a PEM block of `pem_type` ("CERTIFICATE", "PRIVATE KEY";
// a key's type may be prefixed, e.g. "EC PRIVATE KEY").
absl::StatusOr<std::string> ReadPemFile(absl::string_view option, const std::string& path,
                                        absl::string_view pem_type);

}  // namespace sophon

#endif  // SOPHON_NET_TLS_CREDENTIALS_H_
