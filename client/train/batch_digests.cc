#include "client/train/batch_digests.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sophon {

std::string ImagesSha256(const Batch& batch) {
  const void* data = batch.stage == Stage::kTensor
                         ? static_cast<const void*>(batch.images.data())
                         : static_cast<const void*>(batch.pixels.data());
  const size_t size = batch.stage == Stage::kTensor ? batch.images.size() * sizeof(float)
                                                    : batch.pixels.size();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<std::unique_ptr<BatchDigestsWriter>> BatchDigestsWriter::Create(
    const std::string& path) {
  if (path.empty()) return nullptr;
  std::unique_ptr<BatchDigestsWriter> w(new BatchDigestsWriter(path));
  w->out_ << kBatchDigestsHeader << "\n";
  if (!w->out_) {
    return absl::UnavailableError(absl::StrCat("cannot write the batch digests file '", path, "'"));
  }
  return w;
}

void BatchDigestsWriter::Add(int epoch, int64_t batch_index, const Batch& batch) {
  out_ << epoch << "," << batch_index << "," << batch.n << "," << absl::StrJoin(batch.ids, " ")
       << "," << ImagesSha256(batch) << "\n";
}

absl::Status BatchDigestsWriter::Close() {
  out_.flush();
  if (!out_) {
    return absl::UnavailableError(absl::StrCat("error writing the batch digests file '", path_, "'"));
  }
  out_.close();
  return absl::OkStatus();
}

}  // namespace sophon
