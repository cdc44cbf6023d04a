// Per-batch timings of a training run, written as CSV for stall analysis:
//   epoch,batch,samples,data_wait_s,copy_s,compute_s
// data_wait_s: the trainer blocked waiting for this batch; copy_s: host-to-
// device copy inside the step (0 where the trainer does not measure it, e.g.
// on cpu); compute_s: the rest of the step.
#ifndef SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_
#define SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sophon {

inline constexpr char kBatchTimingsHeader[] = "epoch,batch,samples,data_wait_s,copy_s,compute_s";

class BatchTimingsWriter {
 public:
  // Creates (truncates) `path` and writes the header; an empty path asks for
  // no timings and gives a null writer. Unavailable, naming the path, when it
  // cannot be created.
  static absl::StatusOr<std::unique_ptr<BatchTimingsWriter>> Create(const std::string& path);

  void Add(int epoch, int64_t batch, int samples, double data_wait_seconds, double copy_seconds,
           double compute_seconds);
  // Flushes; Unavailable naming the path if any write failed.
  absl::Status Close();

 private:
  explicit BatchTimingsWriter(const std::string& path) : path_(path), out_(path) {}
  const std::string path_;
  std::ofstream out_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_
