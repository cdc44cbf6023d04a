#include "sophon/cli/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "sophon/base/csv.h"

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

bool AbslParseFlag(absl::string_view text, CommaList* list, std::string*) {
  list->items = csv::SplitList(text);
  return true;
}

namespace {

// Each item of `list` parsed by `parse` (false: not valid); InvalidArgument
// naming `flag`, the item and `expected`, or an empty list.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> ParseItems(const CommaList& list, absl::string_view flag,
                                          absl::string_view expected, Parse parse) {
  std::vector<T> values;
  for (const std::string& item : list.items) {
    T v{};
    if (!parse(item, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", item, "' is not ", expected));
    }
    values.push_back(v);
  }
  if (values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": give at least one value"));
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<double>> CommaList::Numbers(absl::string_view flag) const {
  return ParseItems<double>(*this, flag, "a number (expected e.g. 50,100,1000)",
                            [](const std::string& item, double* v) {
                              return absl::SimpleAtod(item, v) && std::isfinite(*v);
                            });
}

absl::StatusOr<std::vector<int>> CommaList::PositiveInts(absl::string_view flag) const {
  return ParseItems<int>(*this, flag, "a positive integer", [](const std::string& item, int* v) {
    return absl::SimpleAtoi(item, v) && *v >= 1;
  });
}

absl::StatusOr<std::vector<double>> CommaList::PerModel(absl::string_view flag, int models,
                                                       absl::string_view models_flag) const {
  absl::StatusOr<std::vector<double>> values = ParseItems<double>(
      *this, flag, "a number", [](const std::string& item, double* v) {
        return absl::SimpleAtod(item, v) && std::isfinite(*v);
      });
  if (!values.ok()) return values.status();
  const size_t n = values->size();
  if (models <= 1 && n > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " has ", n, " values, one per model: train ", n, " models with ", models_flag,
        "=", n, ", or give one value"));
  }
  if (models > 1 && n != 1 && n != static_cast<size_t>(models)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " has ", n, " values but ", models_flag,
                                                   "=", models, ": give one value for all ",
                                                   models, " models, or one per model"));
  }
  if (n == 1) values->resize(static_cast<size_t>(std::max(1, models)), values->front());
  return values;
}

std::string AbslUnparseFlag(const CommaList& list) { return absl::StrJoin(list.items, ","); }

absl::Status ParseRange(absl::string_view flag, absl::string_view text, double* lo, double* hi) {
  const std::vector<std::string> parts = csv::SplitList(text);
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

std::vector<std::string> ParseProgramFlags(int argc, char** argv, const char* usage) {
  // Debian builds Abseil without NDEBUG, which leaves its mutex deadlock
  // detection on: a lock-order graph updated at every first lock of a mutex
  // and at every mutex's destruction (9% of a server's CPU under a flood of
  // short calls, each with a mutex of its own). Programs run without it;
  // the tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  InitUsage(usage);
  ArgvHolder args(argc, argv);
  const std::vector<char*> rest = absl::ParseCommandLine(args.argc(), args.argv());
  return std::vector<std::string>(rest.begin(), rest.end());
}

}  // namespace sophon
