// Line-oriented CSV helpers shared by the profile readers (internal to
// libsophon). Errors carry "FILE:LINE: " so a user can open the bad line.
#ifndef SOPHON_BASE_CSV_H_
#define SOPHON_BASE_CSV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon::csv {

struct Line {
  int number = 0;          // 1-based
  absl::string_view text;  // without the line break (and without a '\r')
};

// The lines of `text`, numbered from 1; blank lines are left out.
std::vector<Line> SplitLines(absl::string_view text);

// Splits on `sep`, trimming ASCII spaces around each field. One trailing
// separator (as the original SOPHON files write) does not make a field.
std::vector<absl::string_view> SplitFields(absl::string_view line, char sep);

// InvalidArgument "FILE:LINE: MESSAGE".
absl::Status LineError(absl::string_view file, int line, absl::string_view message);

// Whole non-negative decimal integer; false otherwise.
bool ParseUint(absl::string_view field, uint64_t* value);
// Finite decimal floating-point number; false otherwise.
bool ParseDouble(absl::string_view field, double* value);

// The file's bytes. NotFound / PermissionDenied / Internal naming the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace sophon::csv

#endif  // SOPHON_BASE_CSV_H_
