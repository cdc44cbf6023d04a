// Where this process sits in a data-parallel job: from the flags, or from
// torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// LOCAL_RANK), as PyTorch users launch their jobs.
#ifndef SOPHON_CLIENT_TRAIN_LAUNCH_ENV_H_
#define SOPHON_CLIENT_TRAIN_LAUNCH_ENV_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "client/train/trainer.h"

namespace sophon {

// What the user gave on the command line; unset values are -1 or "".
struct LaunchFlags {
  int world_size = -1;
  int rank = -1;
  std::string master_addr;
  int master_port = -1;
};

// Fills `base`'s world size, rank, master address and port: a flag wins over
// the environment variable (read through `getenv`), which wins over the
// default (a single process). Errors name the flag or variable and its value;
// the result is checked with DistributedOptions::Validate.
absl::StatusOr<DistributedOptions> ResolveLaunch(
    const LaunchFlags& flags, DistributedOptions base,
    const std::function<const char*(const char*)>& getenv);

// The job's ranks on this node (they share its link and cores; smartoff
// plans with their part, SmartoffOptions.local_world_size): `flag` when
// given (>= 1; -1 = not given), else $LOCAL_WORLD_SIZE (torchrun sets it),
// else the world size when rank 0's address is a loopback one (every rank
// meets on this host), else 1. Errors name the flag or variable and the
// value: it must be in [1, world size].
absl::StatusOr<int> ResolveLocalWorldSize(int flag, const DistributedOptions& distributed,
                                          const std::function<const char*(const char*)>& getenv);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_LAUNCH_ENV_H_
