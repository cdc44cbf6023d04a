// The training node's store of feature vectors across epochs. A job that
// fine-tunes a head with the evaluation transform (no random crops or flips)
// gets the same features for a sample every epoch, so once a sample's
// features are held, later epochs need not fetch or compute them.
//
// Features are kept as fp16 (how they crossed the wire or left this node's
// backbone, so the floats come back exactly) in one arena bounded in bytes.
// Nothing is evicted: an epoch visits every sample once, so when not all fit,
// keeping the first ones that arrived is as good as any other choice, and
// cheaper.
#ifndef SOPHON_CLIENT_LOADER_FEATURE_CACHE_H_
#define SOPHON_CLIENT_LOADER_FEATURE_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sophon {

class FeatureCache {
 public:
  // Holds vectors of `feature_size` values for samples 0 .. num_samples - 1
  // in at most `max_bytes` of vectors (and 4 bytes per sample of index).
  FeatureCache(uint64_t num_samples, int feature_size, int64_t max_bytes);

  // Copies sample `id`'s features into `out` (feature_size floats); false if
  // not held. Thread-safe.
  bool Get(uint64_t id, float* out) const;
  // Keeps sample `id`'s features (fp16, feature_size values) if there is room
  // and it is not held yet. Thread-safe.
  void Put(uint64_t id, const uint16_t* halves);

  int64_t held_samples() const;
  int64_t held_bytes() const;

 private:
  const int feature_size_;
  const int64_t capacity_;  // vectors that fit max_bytes
  mutable absl::Mutex mu_;
  std::vector<int32_t> slot_of_id_ ABSL_GUARDED_BY(mu_);  // -1 = not held
  std::vector<uint16_t> arena_ ABSL_GUARDED_BY(mu_);      // held vectors, in slot order
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_FEATURE_CACHE_H_
