// The one CSV reader and writer of the project: line splitting, plain and
// quoted fields, comma lists, whole-file reads. Every file format (profiles,
// GPU profiles, stall tables, batch timings) is read and written with these.
// Errors carry "FILE:LINE: " so a user can open the bad line.
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

// Splits on `sep` honouring double quotes ("a ""b""" is `a "b"`), trimming
// ASCII spaces around each field. InvalidArgument for an unterminated quote.
absl::StatusOr<std::vector<std::string>> SplitQuotedFields(absl::string_view line, char sep);
// One field for writing: quoted when it holds the separator, a quote or a
// line break (the SplitQuotedFields rules); line breaks become spaces.
std::string QuoteField(absl::string_view field, char sep = ',');

// The items of a comma-separated list ("a, b,,c" is a, b, c): spaces trimmed,
// empty items dropped.
std::vector<std::string> SplitList(absl::string_view text);

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
