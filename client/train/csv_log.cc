#include "client/train/csv_log.h"

#include "absl/strings/str_cat.h"

namespace sophon {

absl::StatusOr<std::unique_ptr<CsvLog>> CsvLog::Create(const std::string& path,
                                                       absl::string_view header,
                                                       absl::string_view what) {
  if (path.empty()) return nullptr;
  std::unique_ptr<CsvLog> log(new CsvLog(path, what));
  log->out_ << header << "\n";
  if (!log->out_) {
    return absl::UnavailableError(absl::StrCat("cannot write the ", what, " file '", path, "'"));
  }
  return log;
}

absl::Status CsvLog::Close() {
  out_.flush();
  if (!out_) {
    return absl::UnavailableError(absl::StrCat("error writing the ", what_, " file '", path_, "'"));
  }
  out_.close();
  return absl::OkStatus();
}

}  // namespace sophon
