#include "sophon/base/csv.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sophon::csv {

std::vector<Line> SplitLines(absl::string_view text) {
  std::vector<Line> lines;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    lines.push_back({number, line});
  }
  return lines;
}

std::vector<absl::string_view> SplitFields(absl::string_view line, char sep) {
  if (!line.empty() && line.back() == sep) line.remove_suffix(1);
  std::vector<absl::string_view> fields = absl::StrSplit(line, sep);
  for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
  return fields;
}

absl::Status LineError(absl::string_view file, int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", message));
}

bool ParseUint(absl::string_view field, uint64_t* value) {
  if (field.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(field[0]))) return false;
  return absl::SimpleAtoi(field, value);
}

bool ParseDouble(absl::string_view field, double* value) {
  return !field.empty() && absl::SimpleAtod(field, value) && std::isfinite(*value);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, expected a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return out.str();
}

}  // namespace sophon::csv
