#include "client/train/launch_env.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sophon/net/credentials.h"

namespace sophon {
namespace {

// The flag's value if given (>= 0), else the variable's, else `fallback`.
absl::StatusOr<int> IntFrom(int flag, const char* flag_name, const char* var,
                            const std::function<const char*(const char*)>& getenv,
                            int fallback) {
  if (flag >= 0) return flag;
  const char* value = getenv(var);
  if (value == nullptr || *value == '\0') return fallback;
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(absl::StrCat("the environment variable ", var, "='", value,
                                                   "' (read for ", flag_name,
                                                   ") is not a non-negative integer"));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<DistributedOptions> ResolveLaunch(
    const LaunchFlags& flags, DistributedOptions base,
    const std::function<const char*(const char*)>& getenv) {
  absl::StatusOr<int> world = IntFrom(flags.world_size, "--world-size", "WORLD_SIZE", getenv, 1);
  if (!world.ok()) return world.status();
  absl::StatusOr<int> rank = IntFrom(flags.rank, "--rank", "RANK", getenv, 0);
  if (!rank.ok()) return rank.status();
  absl::StatusOr<int> port =
      IntFrom(flags.master_port, "--master-port", "MASTER_PORT", getenv, base.master_port);
  if (!port.ok()) return port.status();
  base.world_size = *world;
  base.rank = *rank;
  base.master_port = *port;
  if (!flags.master_addr.empty()) {
    base.master_addr = flags.master_addr;
  } else if (const char* addr = getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    base.master_addr = addr;
  }
  if (absl::Status s = base.Validate(); !s.ok()) return s;
  return base;
}

absl::StatusOr<int> ResolveLocalWorldSize(int flag, const DistributedOptions& distributed,
                                          const std::function<const char*(const char*)>& getenv) {
  const int fallback =
      distributed.world_size > 1 && IsLoopbackHost(distributed.master_addr)
          ? distributed.world_size
          : 1;
  if (flag == 0 || flag < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-world-size must be >= 1 (or -1: $LOCAL_WORLD_SIZE), got ", flag));
  }
  absl::StatusOr<int> local =
      IntFrom(flag, "--local-world-size", "LOCAL_WORLD_SIZE", getenv, fallback);
  if (!local.ok()) return local.status();
  if (*local < 1 || *local > distributed.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag >= 1 ? "--local-world-size" : "the environment variable LOCAL_WORLD_SIZE", " is ",
        *local, ": the ranks on this node must be in [1, ", distributed.world_size,
        "] (the world size)"));
  }
  return *local;
}

}  // namespace sophon
