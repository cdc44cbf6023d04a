// --log-level, which every Sophon program takes: defined once here.
#ifndef SOPHON_CLI_LOG_LEVEL_H_
#define SOPHON_CLI_LOG_LEVEL_H_

#include "absl/status/status.h"

namespace sophon {

// Sets spdlog's level from --log-level (trace, debug, info, warn, error,
// critical, off); InvalidArgument naming the flag for any other value.
absl::Status ApplyLogLevelFlag();

}  // namespace sophon

#endif  // SOPHON_CLI_LOG_LEVEL_H_
