#include "client/train/batch_digests.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "client/train/csv_log.h"

namespace sophon {

std::string ImagesSha256(const Batch& batch) {
  const bool floats = GetStageInfo(batch.stage).layout != Layout::kHwc;  // TENSOR, FEATURES
  const void* data = floats ? static_cast<const void*>(batch.images.data())
                            : static_cast<const void*>(batch.pixels.data());
  const size_t size = floats ? batch.images.size() * sizeof(float) : batch.pixels.size();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

void AddBatchDigest(CsvLog* log, int epoch, const Batch& batch) {
  log->out() << epoch << "," << batch.index << "," << batch.n << ","
             << absl::StrJoin(batch.ids, " ") << "," << ImagesSha256(batch) << "\n";
}

}  // namespace sophon
