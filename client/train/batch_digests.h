// Per-batch digests of a training run, written as CSV so that two runs (two
// modes, sophon-train and the Python loader, before and after a change) can
// be checked for identical batches without storing them:
//   epoch,batch,samples,ids,images_sha256
// ids: the batch's sample ids in order, space-separated; images_sha256: the
// SHA-256 of the batch's image buffer as the trainer receives it (float32
// NCHW, or uint8 NHWC for a uint8 target), lowercase hex.
#ifndef SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_
#define SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_

#include <string>

#include "sophon/data/batch.h"

namespace sophon {

inline constexpr char kBatchDigestsHeader[] = "epoch,batch,samples,ids,images_sha256";
inline constexpr char kBatchDigestsWhat[] = "batch digests";

class CsvLog;

// SHA-256 of `batch`'s image buffer, lowercase hex.
std::string ImagesSha256(const Batch& batch);

// One line of the digests file.
void AddBatchDigest(CsvLog* log, int epoch, const Batch& batch);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_BATCH_DIGESTS_H_
