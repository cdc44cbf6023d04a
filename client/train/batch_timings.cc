#include "client/train/batch_timings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sophon {

absl::StatusOr<std::unique_ptr<BatchTimingsWriter>> BatchTimingsWriter::Create(
    const std::string& path) {
  if (path.empty()) return nullptr;
  std::unique_ptr<BatchTimingsWriter> w(new BatchTimingsWriter(path));
  w->out_ << kBatchTimingsHeader << "\n";
  if (!w->out_) {
    return absl::UnavailableError(absl::StrCat("cannot write the batch timings file '", path, "'"));
  }
  return w;
}

void BatchTimingsWriter::Add(int epoch, int64_t batch, int samples, double data_wait_seconds,
                             double copy_seconds, double compute_seconds) {
  out_ << absl::StrFormat("%d,%d,%d,%.6f,%.6f,%.6f\n", epoch, batch, samples, data_wait_seconds,
                          copy_seconds, compute_seconds);
}

absl::Status BatchTimingsWriter::Close() {
  out_.flush();
  if (!out_) {
    return absl::UnavailableError(absl::StrCat("error writing the batch timings file '", path_, "'"));
  }
  out_.close();
  return absl::OkStatus();
}

}  // namespace sophon
