// libFuzzer target: untrusted file bytes through everything a storage node
// does with them: header read, full decode, and the pipeline from the raw
// stage to the tensor (decode + random resized crop, flip, normalise), with
// small limits so that each input stays cheap. Built only with
// -DSOPHON_FUZZ=ON and clang (tools/fuzz.sh); the seeds are in
// fuzz/corpus/decode (made by tests/image/fuzz_corpus_test.cc).
//
// Besides crashes and sanitizer reports, it aborts when results disagree:
// a decode that succeeds must match the header, and a tensor must be finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/pipeline.h"

namespace {

uint64_t Fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h;
}

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "decode_fuzzer: invariant violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t h = Fnv1a(data, size);
  sophon::DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_memory_bytes = 32 << 20;
  limits.max_scans = 64;
  limits.lenient = (h & 1) != 0;

  const absl::StatusOr<sophon::ImageInfo> info = sophon::ReadJpegInfo(bytes, limits);
  const absl::StatusOr<sophon::Image8> full = sophon::DecodeJpeg(bytes, limits);
  if (full.ok()) {
    Check(info.ok(), "DecodeJpeg succeeded where ReadJpegInfo failed");
    Check(full->width == info->width && full->height == info->height,
          "decoded size differs from the header");
    Check(full->pixels.size() == static_cast<size_t>(full->width) * full->height * 3,
          "decoded buffer size");
  }

  sophon::PipelineOptions options;
  options.limits = limits;
  options.augment.crop_size = 8 + static_cast<int>((h >> 8) % 57);
  const int s = options.augment.crop_size;
  std::vector<float> tensor(3 * static_cast<size_t>(s) * s, NAN);
  sophon::StageData raw;
  raw.data.assign(bytes.data(), bytes.size());
  const sophon::SampleKey key{h >> 16, 1, 7};
  const absl::Status finished = sophon::FinishToTensor(raw, key, options, tensor.data());
  if (finished.ok()) {
    Check(info.ok(), "the pipeline succeeded where ReadJpegInfo failed");
    for (float v : tensor) Check(std::isfinite(v), "non-finite tensor value");
  }
  // The staged path (decode + crop, then flip) must agree with the fused one.
  const absl::StatusOr<sophon::StageData> flipped =
      sophon::RunPipeline(std::move(raw), sophon::Stage::kFlipped, key, options);
  Check(flipped.ok() == finished.ok(), "staged and fused pipelines disagree on success");
  if (flipped.ok()) {
    Check(flipped->height == s && flipped->width == s &&
              flipped->data.size() == static_cast<size_t>(s) * s * 3,
          "flipped payload size");
  }
  return 0;
}
