// A frozen backbone and its head: a checkpoint written by sophon-train --save,
// loaded in evaluation mode without gradients, computing each image's
// features (the classifier's input) and the head's logits of them. What a storage node runs for near-data feature
// extraction, and what a training node runs when it extracts features
// itself; both give the same floats for the same checkpoint and images.
//
// LibTorch-free: the storage node includes it (server/cli/load_backbone.cc);
// model/models.h, which pulls in LibTorch, is for the LibTorch libraries only.
#ifndef SOPHON_MODEL_BACKBONE_H_
#define SOPHON_MODEL_BACKBONE_H_

#include <memory>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "sophon/ops/feature_extractor.h"

namespace sophon {

struct BackboneOptions {
  std::string checkpoint;  // written by sophon-train --save (architecture and classes inside)
  // LibTorch's intra-op threads for the forward passes (process-wide); 0 =
  // leave LibTorch's setting.
  int threads = 0;

  absl::Status Validate() const;  // names the field
};

class Backbone final : public FeatureExtractor {
 public:
  // Reads the checkpoint's architecture and class count, builds the model and
  // loads it. NotFound / InvalidArgument naming the file (not a checkpoint,
  // an unknown architecture, tensors of the wrong shape).
  static absl::StatusOr<std::unique_ptr<Backbone>> Load(const BackboneOptions& options);
  ~Backbone() override;

  int feature_size() const override { return feature_size_; }
  std::string description() const override { return description_; }
  // FNV-1a over the name, shape and bytes of every parameter and buffer
  // outside the head: a checkpoint fine-tuned from this one (a new or tuned
  // head) has the same fingerprint.
  uint64_t fingerprint() const override { return fingerprint_; }
  // The same over the head's parameters and buffers.
  uint64_t head_fingerprint() const override { return head_fingerprint_; }
  const std::string& arch() const { return arch_; }
  int num_classes() const override { return num_classes_; }
  // One forward pass at a time (each uses the intra-op threads).
  absl::Status Extract(const float* images, int n, int s, float* out) const override;
  absl::Status Classify(const float* features, int n, float* out) const override;

 private:
  struct Model;
  Backbone() = default;
  std::unique_ptr<Model> model_;
  std::string arch_;
  int num_classes_ = 0;
  int feature_size_ = 0;
  uint64_t fingerprint_ = 0;
  uint64_t head_fingerprint_ = 0;
  int min_input_size_ = 0;
  std::string description_;
  mutable std::mutex mu_;
};

}  // namespace sophon

#endif  // SOPHON_MODEL_BACKBONE_H_
