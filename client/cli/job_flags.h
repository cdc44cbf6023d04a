// The flags every training-node program shares (sophon-train, sophon-infer,
// the loader benchmark), defined once: the storage servers and the transport
// to them, the loader's common options, this node's sample cache and
// smartoff's profile and link. Each function reads its flags into the
// JobSpec part it names; the programs define only their own flags.
#ifndef SOPHON_CLIENT_CLI_JOB_FLAGS_H_
#define SOPHON_CLIENT_CLI_JOB_FLAGS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/job/job_spec.h"
#include "sophon/cli/cli.h"

namespace sophon {

// --server (or --servers-file), --credentials, --tls-ca, --tls-cert,
// --tls-key, --tls-server-name, --auth-token-file, --connect-timeout.
// `default_server`: the address when neither --server nor --servers-file is
// given; empty = one of them is required (InvalidArgument naming them).
absl::StatusOr<ServersSpec> ServersSpecFromFlags(absl::string_view default_server);
// True when --server or --servers-file is given.
bool ServerFlagsGiven();

// --workers, --prefetch-batches, --crop-size, --lenient-jpeg.
void LoaderFlagsInto(LoaderOptions* loader);

// --local-cache-bytes, --local-cache-policy, --local-cache-dir,
// --local-cache-dir-bytes (checked by LocalCacheOptions::Validate).
absl::StatusOr<LocalCacheOptions> LocalCacheFromFlags();

// --profile-folder and --net-bw.
absl::Status SmartoffFlagsInto(SmartoffOptions* smartoff);

// The option names in a JobSpec's errors, each with the flag above that sets
// it (for FailProgram).
const FlagNames& JobFlagNames();

}  // namespace sophon

#endif  // SOPHON_CLIENT_CLI_JOB_FLAGS_H_
