// Command-line helpers shared by the programs.
#ifndef SOPHON_CLI_CLI_H_
#define SOPHON_CLI_CLI_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

// The program's map from option names, as library errors spell them
// ("LoaderOptions.batch_size"), to the flag that sets each ("--batch-size").
using FlagNames = std::vector<std::pair<std::string, std::string>>;

// `status` with the flag that caused it in front: "--mode: unknown mode ...".
absl::Status FlagError(absl::string_view flag, const absl::Status& status);
// Prints "PROGRAM: MESSAGE" to stderr, naming the flag of the first option
// in `names` that the message mentions, and returns the exit code: 2 for
// InvalidArgument (a usage error), 1 otherwise.
int FailProgram(absl::string_view program, const absl::Status& status, const FlagNames& names);

// The one comma-separated-list flag type ("a,b, c": spaces trimmed, empty
// items dropped; csv::SplitList). ABSL_FLAG(sophon::CommaList, name,
// sophon::CommaList({"a", "b"}), "...").
struct CommaList {
  CommaList() = default;
  explicit CommaList(std::vector<std::string> v) : items(std::move(v)) {}
  std::vector<std::string> items;

  // The items as finite numbers / positive integers; InvalidArgument naming
  // `flag` and the bad item, or an empty list.
  absl::StatusOr<std::vector<double>> Numbers(absl::string_view flag) const;
  absl::StatusOr<std::vector<int>> PositiveInts(absl::string_view flag) const;
  // One finite number per model of an array of `models` (a single value is
  // repeated for every model). InvalidArgument naming `flag` for a bad item,
  // or a count that is neither 1 nor `models` (naming `models_flag`, the
  // option that sets how many models there are).
  absl::StatusOr<std::vector<double>> PerModel(absl::string_view flag, int models,
                                               absl::string_view models_flag) const;
};
bool AbslParseFlag(absl::string_view text, CommaList* list, std::string* error);
std::string AbslUnparseFlag(const CommaList& list);

// "MIN,MAX" into two numbers; InvalidArgument naming `flag` otherwise.
absl::Status ParseRange(absl::string_view flag, absl::string_view text, double* lo, double* hi);

// Abseil flags are spelled with underscores; Sophon documents them with dashes
// (--prep-workers). Returns argv with dashes in flag names (not in values)
// turned into underscores, stopping at a bare "--".
std::vector<std::string> NormalizeFlagNames(int argc, char** argv);

// Sets the usage text and makes --help list every Sophon flag (Abseil's
// default shows only flags defined in a file named like the program).
void InitUsage(const char* usage);

// What every program does first: InitUsage(usage), then Abseil's
// ParseCommandLine over argv with dashes in flag names accepted
// (NormalizeFlagNames). Returns the arguments that are not flags, the
// program's name first. Also turns Abseil's mutex deadlock detection off
// (Debian's Abseil leaves it on; tests keep it).
std::vector<std::string> ParseProgramFlags(int argc, char** argv, const char* usage);

// Keeps the strings alive and exposes them as a char* array for ParseCommandLine.
class ArgvHolder {
 public:
  ArgvHolder(int argc, char** argv);
  int argc() const { return static_cast<int>(pointers_.size()) - 1; }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

}  // namespace sophon

#endif  // SOPHON_CLI_CLI_H_
