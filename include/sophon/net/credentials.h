// Transport credentials chosen by name, for both sides of the Sophon
// service (modelled on tf.data's credentials_factory). Each kind registers
// one factory that makes the server's and the channel's credentials from a
// CredentialsOptions; securing the service is then configuration, not an
// edit of every server and channel.
#ifndef SOPHON_NET_CREDENTIALS_H_
#define SOPHON_NET_CREDENTIALS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace sophon {

// Which credentials a server or a channel uses. Kinds that need more (TLS
// certificate, key and CA paths, a token file) add their fields here.
struct CredentialsOptions {
  // A registered kind (CredentialsKinds()). "insecure": plaintext, no
  // authentication; only for a trusted network.
  std::string kind = "insecure";
};

// What a kind provides: one function per side. Each gets the options (to read
// its own fields) and names the option or file at fault in its errors.
struct CredentialsFactory {
  std::function<absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>(
      const CredentialsOptions&)>
      server;
  std::function<absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>(
      const CredentialsOptions&)>
      channel;
};

// Adds a kind. InvalidArgument if `kind` is empty or a function is missing,
// AlreadyExists if the kind is taken. Thread-safe. Built-in kinds
// ("insecure") are registered before any lookup.
absl::Status RegisterCredentialsKind(const std::string& kind, CredentialsFactory factory);

// The registered kinds, sorted. Thread-safe.
std::vector<std::string> CredentialsKinds();

// Credentials of options.kind for a server / a channel. InvalidArgument
// naming CredentialsOptions.kind and listing the known kinds if the kind is
// not registered; otherwise the factory's error. Thread-safe.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CreateServerCredentials(
    const CredentialsOptions& options);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CreateChannelCredentials(
    const CredentialsOptions& options);

}  // namespace sophon

#endif  // SOPHON_NET_CREDENTIALS_H_
