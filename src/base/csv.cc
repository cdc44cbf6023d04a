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

absl::StatusOr<std::vector<std::string>> SplitQuotedFields(absl::string_view line, char sep) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') {
        fields.back() += c;
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == sep) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted) return absl::InvalidArgumentError("unterminated double quote");
  for (std::string& f : fields) f = std::string(absl::StripAsciiWhitespace(f));
  return fields;
}

std::string QuoteField(absl::string_view field, char sep) {
  if (field.find_first_of(std::string{sep, '"', '\r', '\n'}) == absl::string_view::npos) {
    return std::string(field);
  }
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += (c == '\r' || c == '\n') ? ' ' : c;  // the reader is line-based
  }
  return out + "\"";
}

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
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
