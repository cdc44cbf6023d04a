// One bit per sample of the manifest: true the first time a sample is marked.
// Lets the server log something once per file (a file it cannot crop
// losslessly) whatever the number of requests for it, in n / 8 bytes.
#ifndef SOPHON_SERVER_ONCE_PER_SAMPLE_H_
#define SOPHON_SERVER_ONCE_PER_SAMPLE_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace sophon {

class OncePerSample {
 public:
  explicit OncePerSample(uint64_t samples)
      : words_((samples + 63) / 64), bits_(new std::atomic<uint64_t>[words_]()) {}

  // True for the first call with `id` (thread-safe); false after, and for an
  // id outside the manifest.
  bool First(uint64_t id) {
    if (id / 64 >= words_) return false;
    const uint64_t bit = uint64_t{1} << (id % 64);
    return (bits_[id / 64].fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
  }

 private:
  const uint64_t words_;
  const std::unique_ptr<std::atomic<uint64_t>[]> bits_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_ONCE_PER_SAMPLE_H_
