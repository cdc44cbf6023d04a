// Transport credentials chosen by name, for both sides of the Sophon
// service (modelled on tf.data's credentials_factory). Each kind registers
// one factory that makes the server's and the channel's credentials from a
// CredentialsOptions; securing the service is then configuration, not an
// edit of every server and channel.
//
// Built-in kinds:
//   "insecure"  plaintext, no authentication: for loopback or a trusted network.
//   "tls"       TLS with the server's certificate (tls_cert, tls_key); mutual TLS
//               when the server gets tls_client_ca; optionally a bearer token
//               (auth_token_file) checked on every call.
#ifndef SOPHON_NET_CREDENTIALS_H_
#define SOPHON_NET_CREDENTIALS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class Channel;
class ChannelArguments;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace sophon {

// Which side the options are for: some fields belong to one side only.
enum class CredentialsSide { kServer, kChannel };

// Which credentials a server or a channel uses. Paths are PEM files, read
// when the credentials are made.
struct CredentialsOptions {
  // A registered kind (CredentialsKinds()): "insecure" or "tls" built in.
  std::string kind = "insecure";

  // kind "tls", both sides: this side's certificate chain and its private key.
  // Required on the server; on a channel, the client certificate for mutual
  // TLS (both or neither).
  std::string tls_cert;
  std::string tls_key;
  // kind "tls", server only: CA certificates that sign client certificates.
  // When set, every client must present a certificate signed by one of them
  // (mutual TLS); when empty, clients are not asked for one.
  std::string tls_client_ca;
  // kind "tls", channel only: CA certificates that the server's certificate
  // must chain to; empty = the system's roots.
  std::string tls_ca;
  // kind "tls", channel only: the name checked against the server's
  // certificate instead of the host in the address (for an IP address or a
  // test certificate). Empty = the address's host.
  std::string tls_server_name;
  // Both sides, kind "tls" only: a file holding a bearer token (surrounding
  // whitespace trimmed; printable ASCII, no spaces). The server refuses calls
  // without "authorization: Bearer <token>" (UNAUTHENTICATED); the channel
  // sends it on every call. A token is never sent or accepted in plaintext.
  std::string auth_token_file;

  // The fields a kind's side may use, checked without reading any file:
  // InvalidArgument naming the option (`CredentialsOptions.tls_key ...`).
  // Kinds other than the built-in ones are only checked for TLS fields set
  // with kind "insecure" (none of them applies to plaintext).
  absl::Status Validate(CredentialsSide side) const;
};

// "tls" when any TLS field (tls_cert, tls_key, tls_client_ca, tls_ca,
// tls_server_name) is set, else "insecure": what the programs use when the
// user names no kind.
std::string DefaultCredentialsKind(const CredentialsOptions& options);

// One line for the logs saying which transport and authentication `options`
// give on `side`: kind, certificate paths, whether client certificates and a
// token are required. Never a key or a token.
std::string DescribeCredentials(const CredentialsOptions& options, CredentialsSide side);

// True for a host that only this machine can reach: "localhost", 127.0.0.0/8,
// ::1 (with or without brackets). False for anything else, including
// 0.0.0.0, :: and other names.
bool IsLoopbackHost(const std::string& host);

// What a kind provides: one function per side, and optionally channel
// arguments (e.g. the TLS server name override). Each gets the options (to
// read its own fields) and names the option or file at fault in its errors.
struct CredentialsFactory {
  std::function<absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>(
      const CredentialsOptions&)>
      server;
  std::function<absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>(
      const CredentialsOptions&)>
      channel;
  // Optional: adjusts a channel's arguments (CreateChannel calls it).
  std::function<void(const CredentialsOptions&, grpc::ChannelArguments*)> channel_arguments;
};

// Adds a kind. InvalidArgument if `kind` is empty or a function is missing,
// AlreadyExists if the kind is taken. Thread-safe. Built-in kinds
// ("insecure", "tls") are registered before any lookup.
absl::Status RegisterCredentialsKind(const std::string& kind, CredentialsFactory factory);

// The registered kinds, sorted. Thread-safe.
std::vector<std::string> CredentialsKinds();

// Credentials of options.kind for a server / a channel: options.Validate(side)
// first, then InvalidArgument naming CredentialsOptions.kind and listing the
// known kinds if the kind is not registered; otherwise the factory's error
// (a file that cannot be read or is not PEM names the option and the file).
// Thread-safe.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CreateServerCredentials(
    const CredentialsOptions& options);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CreateChannelCredentials(
    const CredentialsOptions& options);

// A channel to `target` with the channel credentials of `options` and the
// kind's channel arguments added to `args`. Errors as CreateChannelCredentials.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const CredentialsOptions& options,
                                                             grpc::ChannelArguments args);

}  // namespace sophon

#endif  // SOPHON_NET_CREDENTIALS_H_
