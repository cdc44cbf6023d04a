// A frozen classifier seen by the ops without LibTorch: its backbone turns
// normalised images into feature vectors (the pooled activations in front of
// the classifier, the FEATURES stage) and its head turns those into class
// scores (the PREDICTIONS stage). sophon_torch's Backbone implements it.
#ifndef SOPHON_OPS_FEATURE_EXTRACTOR_H_
#define SOPHON_OPS_FEATURE_EXTRACTOR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace sophon {

class FeatureExtractor {
 public:
  virtual ~FeatureExtractor() = default;
  // Floats per image that Extract writes.
  virtual int feature_size() const = 0;
  // What it runs, for logs and errors ("resnet18 (10 classes) from ckpt.pt").
  virtual std::string description() const = 0;
  // Identifies the weights that compute the features (a hash of the
  // backbone's tensors, not of the head's): two extractors with the same
  // fingerprint give the same features.
  virtual uint64_t fingerprint() const = 0;
  // `n` images, float32 [n, 3, s, s] contiguous, normalised as the TENSOR
  // stage is, to n * feature_size() floats in `out`. Thread-safe.
  // InvalidArgument for an image too small for the network.
  virtual absl::Status Extract(const float* images, int n, int s, float* out) const = 0;

  // Classes the head scores (its output size).
  virtual int num_classes() const = 0;
  // Identifies the head's weights as fingerprint() the backbone's: two
  // extractors with both fingerprints equal give the same predictions.
  virtual uint64_t head_fingerprint() const = 0;
  // `n` feature vectors (n * feature_size() floats) to n * num_classes()
  // logits in `out`. Thread-safe.
  virtual absl::Status Classify(const float* features, int n, float* out) const = 0;
};

}  // namespace sophon

#endif  // SOPHON_OPS_FEATURE_EXTRACTOR_H_
