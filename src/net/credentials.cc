#include "sophon/net/credentials.h"

#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "sophon/net/tls_credentials.h"

namespace sophon {
namespace {

// The kinds, keyed by name. Built-in kinds are added when the registry is
// first used (not by static registrars, which a static library may drop).
class Registry {
 public:
  static Registry& Get() {
    static Registry* const registry = new Registry();  // never destroyed
    return *registry;
  }

  Registry() {
    CredentialsFactory insecure;
    insecure.server = [](const CredentialsOptions&)
        -> absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> {
      return grpc::InsecureServerCredentials();
    };
    insecure.channel = [](const CredentialsOptions&)
        -> absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> {
      return grpc::InsecureChannelCredentials();
    };
    factories_.emplace("insecure", std::move(insecure));
    factories_.emplace("tls", TlsCredentialsFactory());
  }

  absl::Status Register(const std::string& kind, CredentialsFactory factory) {
    if (kind.empty()) return absl::InvalidArgumentError("a credentials kind needs a name");
    if (!factory.server || !factory.channel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "credentials kind '", kind, "' must provide both a server and a channel factory"));
    }
    absl::MutexLock lock(&mu_);
    if (!factories_.emplace(kind, std::move(factory)).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("credentials kind '", kind, "' is already registered"));
    }
    return absl::OkStatus();
  }

  std::vector<std::string> Kinds() const {
    absl::MutexLock lock(&mu_);
    return KindsLocked();
  }

  // A copy, so that the factory runs without the lock held.
  absl::StatusOr<CredentialsFactory> Find(const std::string& kind) const {
    absl::MutexLock lock(&mu_);
    auto it = factories_.find(kind);
    if (it == factories_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CredentialsOptions.kind '", kind,
                       "' is not a known credentials kind; known kinds: ",
                       absl::StrJoin(KindsLocked(), ", ")));
    }
    return it->second;
  }

 private:
  std::vector<std::string> KindsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> kinds;
    for (const auto& [kind, factory] : factories_) kinds.push_back(kind);
    return kinds;  // sorted: std::map
  }

  mutable absl::Mutex mu_;
  std::map<std::string, CredentialsFactory> factories_ ABSL_GUARDED_BY(mu_);
};

// The TLS fields and their sides, for the checks below.
struct TlsField {
  const char* name;
  std::string CredentialsOptions::*field;
  bool server;   // may be set on a server
  bool channel;  // may be set on a channel
};
constexpr TlsField kTlsFields[] = {
    {"tls_cert", &CredentialsOptions::tls_cert, true, true},
    {"tls_key", &CredentialsOptions::tls_key, true, true},
    {"tls_client_ca", &CredentialsOptions::tls_client_ca, true, false},
    {"tls_ca", &CredentialsOptions::tls_ca, false, true},
    {"tls_server_name", &CredentialsOptions::tls_server_name, false, true},
};

}  // namespace

absl::Status CredentialsOptions::Validate(CredentialsSide side) const {
  const bool server = side == CredentialsSide::kServer;
  if (kind.empty()) {
    return absl::InvalidArgumentError(
        "CredentialsOptions.kind is empty; known kinds: " + absl::StrJoin(CredentialsKinds(), ", "));
  }
  if (kind == "insecure") {
    for (const TlsField& f : kTlsFields) {
      if (!(this->*f.field).empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CredentialsOptions.", f.name, " is set but the credentials kind is 'insecure' "
            "(plaintext); TLS options need kind 'tls'"));
      }
    }
    if (!auth_token_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CredentialsOptions.auth_token_file needs TLS: a bearer token sent in plaintext can be "
          "read by anyone on the network, so tokens are only used with kind 'tls' (",
          server ? "give the server its certificate and key" : "connect to a TLS server",
          ")"));
    }
    return absl::OkStatus();
  }
  if (kind != "tls") return absl::OkStatus();  // another kind checks its own fields
  for (const TlsField& f : kTlsFields) {
    if (!(this->*f.field).empty() && !(server ? f.server : f.channel)) {
      return absl::InvalidArgumentError(absl::StrCat("CredentialsOptions.", f.name,
                                                     " applies to ",
                                                     server ? "clients" : "servers",
                                                     " only, not to a ",
                                                     server ? "server" : "client"));
    }
  }
  if (server) {
    if (tls_cert.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CredentialsOptions.tls_cert is required for a TLS server: the PEM certificate (chain) "
          "it presents to clients", tls_key.empty() ? "" : " (a key was given without it)"));
    }
    if (tls_key.empty()) {
      return absl::InvalidArgumentError(
          "CredentialsOptions.tls_key is required for a TLS server: the PEM private key of its "
          "certificate");
    }
  } else if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        tls_cert.empty() ? "CredentialsOptions.tls_key is set without a client certificate: "
                           "mutual TLS needs both the certificate and its key"
                         : "CredentialsOptions.tls_cert is set without its private key: "
                           "mutual TLS needs both the certificate and its key");
  }
  return absl::OkStatus();
}

std::string DefaultCredentialsKind(const CredentialsOptions& options) {
  for (const TlsField& f : kTlsFields) {
    if (!(options.*f.field).empty()) return "tls";
  }
  return "insecure";
}

std::string DescribeCredentials(const CredentialsOptions& options, CredentialsSide side) {
  if (options.kind == "insecure") return "plaintext (no TLS, no authentication)";
  if (options.kind != "tls") return absl::StrCat("credentials kind '", options.kind, "'");
  const std::string token = options.auth_token_file.empty()
                                ? "no bearer token"
                                : absl::StrCat("bearer token from ", options.auth_token_file);
  if (side == CredentialsSide::kServer) {
    return absl::StrCat(
        "TLS with certificate ", options.tls_cert, ", ",
        options.tls_client_ca.empty()
            ? std::string("client certificates not requested")
            : absl::StrCat("client certificates required, signed by ", options.tls_client_ca),
        ", ", options.auth_token_file.empty() ? "no bearer token" : "bearer token required");
  }
  return absl::StrCat(
      "TLS, server certificate checked against ",
      options.tls_ca.empty() ? std::string("the system's roots") : options.tls_ca,
      options.tls_server_name.empty() ? "" : absl::StrCat(" for name ", options.tls_server_name),
      ", ",
      options.tls_cert.empty() ? std::string("no client certificate")
                               : absl::StrCat("client certificate ", options.tls_cert),
      ", ", token);
}

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (absl::AsciiStrToLower(h) == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status RegisterCredentialsKind(const std::string& kind, CredentialsFactory factory) {
  return Registry::Get().Register(kind, std::move(factory));
}

std::vector<std::string> CredentialsKinds() { return Registry::Get().Kinds(); }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CreateServerCredentials(
    const CredentialsOptions& options) {
  if (absl::Status s = options.Validate(CredentialsSide::kServer); !s.ok()) return s;
  absl::StatusOr<CredentialsFactory> factory = Registry::Get().Find(options.kind);
  if (!factory.ok()) return factory.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = factory->server(options);
  if (credentials.ok() && *credentials == nullptr) {
    return absl::InternalError(absl::StrCat("credentials kind '", options.kind,
                                            "' made no server credentials"));
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CreateChannelCredentials(
    const CredentialsOptions& options) {
  if (absl::Status s = options.Validate(CredentialsSide::kChannel); !s.ok()) return s;
  absl::StatusOr<CredentialsFactory> factory = Registry::Get().Find(options.kind);
  if (!factory.ok()) return factory.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      factory->channel(options);
  if (credentials.ok() && *credentials == nullptr) {
    return absl::InternalError(absl::StrCat("credentials kind '", options.kind,
                                            "' made no channel credentials"));
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const CredentialsOptions& options,
                                                             grpc::ChannelArguments args) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      CreateChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<CredentialsFactory> factory = Registry::Get().Find(options.kind);
  if (!factory.ok()) return factory.status();
  if (factory->channel_arguments) factory->channel_arguments(options, &args);
  return grpc::CreateCustomChannel(target, *credentials, args);
}

}  // namespace sophon
