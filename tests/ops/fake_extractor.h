// A LibTorch-free FeatureExtractor for tests: each image's F features are
// the means of F equal bands of its floats, scaled by the band's index + 1;
// the logit of class c is sum_f features[f] * ((f + c) % 3 - 1) + c / 100.
#ifndef SOPHON_TESTS_OPS_FAKE_EXTRACTOR_H_
#define SOPHON_TESTS_OPS_FAKE_EXTRACTOR_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "sophon/ops/feature_extractor.h"

namespace sophon::testing {

class FakeExtractor final : public FeatureExtractor {
 public:
  explicit FakeExtractor(int features, uint64_t fingerprint = 1, int classes = 4,
                         uint64_t head_fingerprint = 2)
      : features_(features),
        fingerprint_(fingerprint),
        classes_(classes),
        head_fingerprint_(head_fingerprint) {}
  int feature_size() const override { return features_; }
  std::string description() const override { return absl::StrCat("fake(", features_, ")"); }
  uint64_t fingerprint() const override { return fingerprint_; }
  int num_classes() const override { return classes_; }
  uint64_t head_fingerprint() const override { return head_fingerprint_; }
  absl::Status Classify(const float* features, int n, float* out) const override {
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < classes_; ++c) {
        double logit = c / 100.0;
        for (int f = 0; f < features_; ++f) {
          logit += features[i * features_ + f] * ((f + c) % 3 - 1);
        }
        out[i * classes_ + c] = static_cast<float>(logit);
      }
    }
    return absl::OkStatus();
  }
  absl::Status Extract(const float* images, int n, int s, float* out) const override {
    if (s < 2) return absl::InvalidArgumentError("images of 1 x 1 are too small for fake");
    const int64_t values = int64_t{3} * s * s, band = values / features_;
    for (int i = 0; i < n; ++i) {
      for (int f = 0; f < features_; ++f) {
        double sum = 0;
        for (int64_t k = f * band; k < (f + 1) * band; ++k) sum += images[i * values + k];
        out[i * features_ + f] = static_cast<float>(sum / band * (f + 1));
      }
    }
    return absl::OkStatus();
  }

 private:
  int features_;
  uint64_t fingerprint_;
  int classes_;
  uint64_t head_fingerprint_;
};

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_OPS_FAKE_EXTRACTOR_H_
