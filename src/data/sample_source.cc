#include "sophon/data/sample_source.h"

namespace sophon {
namespace {

// FNV-1a, 64 bit.
uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

uint64_t ManifestFingerprint(const std::vector<ManifestEntry>& entries) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const ManifestEntry& entry : entries) {
    h = Fnv1a(h, entry.relative_path.data(), entry.relative_path.size());
    h = Fnv1a(h, &entry.raw_size, sizeof(entry.raw_size));
    h = Fnv1a(h, &entry.label, sizeof(entry.label));
  }
  return h;
}

}  // namespace sophon
