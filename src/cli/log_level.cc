#include "sophon/cli/log_level.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, log_level, "info",
          "Least severe log lines shown: trace, debug, info, warn, error, critical or off. "
          "Default info.");

namespace sophon {

absl::Status ApplyLogLevelFlag() {
  const std::string name = absl::AsciiStrToLower(absl::GetFlag(FLAGS_log_level));
  // spdlog reads an unknown name as "off": a typo would hide every error.
  for (const char* known : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (name == known) {
      spdlog::set_level(spdlog::level::from_str(name));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--log-level must be trace, debug, info, warn, error, critical or off, got '",
                   absl::GetFlag(FLAGS_log_level), "'"));
}

}  // namespace sophon
