#include "client/job/job_spec.h"

#include "absl/strings/str_cat.h"

namespace sophon {

CredentialsOptions ServersSpec::ResolvedCredentials() const {
  CredentialsOptions c = credentials;
  if (c.kind == "auto") c.kind = DefaultCredentialsKind(c);
  return c;
}

std::vector<ClientOptions> ServersSpec::Clients() const {
  const CredentialsOptions resolved = ResolvedCredentials();
  std::vector<ClientOptions> clients;
  clients.reserve(addresses.size());
  for (const std::string& address : addresses) {
    ClientOptions c;
    c.address = address;
    c.credentials = resolved;
    c.connect_timeout = connect_timeout;
    clients.push_back(std::move(c));
  }
  return clients;
}

absl::Status ServersSpec::Validate() const {
  if (addresses.empty()) {
    return absl::InvalidArgumentError("ServersSpec.addresses: give at least one HOST:PORT");
  }
  if (connect_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.connect_timeout must be >= 0, got ",
                     absl::FormatDuration(connect_timeout)));
  }
  return ResolvedCredentials().Validate(CredentialsSide::kChannel);
}

absl::Status JobSpec::Validate() const {
  if (absl::Status s = servers.Validate(); !s.ok()) return s;
  if (absl::Status s = loader.Validate(); !s.ok()) return s;
  if (absl::Status s = cache.Validate(); !s.ok()) return s;
  if (absl::Status s = share.Validate(); !s.ok()) return s;
  if (ingress_mbit < 0 && ingress_mbit != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JobSpec.ingress_mbit must be >= 0 Mbit/s, or -1 to probe it, got ", ingress_mbit));
  }
  if (smart()) {
    SmartoffOptions checked = smartoff;
    checked.planner = mode;
    if (absl::Status s = checked.Validate(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace sophon
