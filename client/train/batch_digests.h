// Per-batch digests of a training run, written as CSV so that two runs (two
// modes, sophon-train and the Python loader, before and after a change) can
// be checked for identical batches without storing them:
//   epoch,batch,samples,ids,images_sha256
// ids: the batch's sample ids in order, space-separated; images_sha256: the
// SHA-256 of the batch's image buffer as the trainer receives it (float32
// NCHW, or uint8 NHWC for a uint8 target), lowercase hex.
#ifndef SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_
#define SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sophon/data/batch.h"

namespace sophon {

inline constexpr char kBatchDigestsHeader[] = "epoch,batch,samples,ids,images_sha256";

// SHA-256 of `batch`'s image buffer, lowercase hex.
std::string ImagesSha256(const Batch& batch);

class BatchDigestsWriter {
 public:
  // Creates (truncates) `path` and writes the header; an empty path asks for
  // no digests and gives a null writer. Unavailable, naming the path, when it
  // cannot be created.
  static absl::StatusOr<std::unique_ptr<BatchDigestsWriter>> Create(const std::string& path);

  void Add(int epoch, int64_t batch_index, const Batch& batch);
  // Flushes; Unavailable naming the path if any write failed.
  absl::Status Close();

 private:
  explicit BatchDigestsWriter(const std::string& path) : path_(path), out_(path) {}
  const std::string path_;
  std::ofstream out_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_
