// A CSV file a run writes line by line (per-batch timings, per-batch digests).
#ifndef SOPHON_CLIENT_TRAIN_CSV_LOG_H_
#define SOPHON_CLIENT_TRAIN_CSV_LOG_H_

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

class CsvLog {
 public:
  // Creates (truncates) `path` and writes `header`; an empty path asks for no
  // file and gives null. Unavailable, naming `what` ("batch timings") and the
  // path, when it cannot be created.
  static absl::StatusOr<std::unique_ptr<CsvLog>> Create(const std::string& path,
                                                        absl::string_view header,
                                                        absl::string_view what);
  // Where the lines go (each ends with "\n").
  std::ostream& out() { return out_; }
  // Flushes; Unavailable naming the file if any write failed.
  absl::Status Close();

 private:
  CsvLog(const std::string& path, absl::string_view what) : path_(path), what_(what), out_(path) {}
  const std::string path_;
  const std::string what_;
  std::ofstream out_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_CSV_LOG_H_
