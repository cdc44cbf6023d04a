#include "sophon/net/credentials.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

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

}  // namespace

absl::Status RegisterCredentialsKind(const std::string& kind, CredentialsFactory factory) {
  return Registry::Get().Register(kind, std::move(factory));
}

std::vector<std::string> CredentialsKinds() { return Registry::Get().Kinds(); }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CreateServerCredentials(
    const CredentialsOptions& options) {
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

}  // namespace sophon
