#include "sophon/cli.h"

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace sophon {

std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> out;
  bool flags_over = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && !flags_over) {
      if (arg == "--") {
        flags_over = true;
      } else if (arg.size() > 2 && arg[0] == '-') {
        const size_t start = arg[1] == '-' ? 2 : 1;
        const size_t end = arg.find('=');
        for (size_t k = start; k < std::min(end, arg.size()); ++k) {
          if (arg[k] == '-') arg[k] = '_';
        }
      }
    }
    out.push_back(std::move(arg));
  }
  return out;
}

void InitUsage(const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

ArgvHolder::ArgvHolder(int argc, char** argv) : args_(NormalizeFlagNames(argc, argv)) {
  for (std::string& a : args_) pointers_.push_back(a.data());
  pointers_.push_back(nullptr);
}

}  // namespace sophon
