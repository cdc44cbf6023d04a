#include "sophon/cli/cli.h"

#include <cstdio>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sophon {

absl::Status FlagError(absl::string_view flag, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(flag, ": ", status.message()));
}

int FailProgram(absl::string_view program, const absl::Status& status, const FlagNames& names) {
  std::string message(status.message());
  for (const auto& [option, flag] : names) {
    if (absl::StrContains(message, option)) {
      message = absl::StrCat(flag, ": ", message);
      break;
    }
  }
  std::fprintf(stderr, "%s: %s\n", std::string(program).c_str(), message.c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

std::vector<std::string> SplitCommaList(absl::string_view text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

bool AbslParseFlag(absl::string_view text, CommaList* list, std::string*) {
  list->items = SplitCommaList(text);
  return true;
}

std::string AbslUnparseFlag(const CommaList& list) { return absl::StrJoin(list.items, ","); }

absl::Status ParseRange(absl::string_view flag, absl::string_view text, double* lo, double* hi) {
  const std::vector<std::string> parts = SplitCommaList(text);
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], lo) || !absl::SimpleAtod(parts[1], hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be MIN,MAX (two numbers), got '", text, "'"));
  }
  return absl::OkStatus();
}

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
