#include "sophon/data/manifest_table.h"

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

uint32_t SampleVersion(int64_t mtime_seconds, int64_t mtime_nanoseconds) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = Fnv1a(h, &mtime_seconds, sizeof(mtime_seconds));
  h = Fnv1a(h, &mtime_nanoseconds, sizeof(mtime_nanoseconds));
  const uint32_t v = static_cast<uint32_t>(h ^ (h >> 32));
  return v == 0 ? 1 : v;
}

void ManifestTable::Reserve(size_t samples, size_t path_bytes) {
  paths_.reserve(path_bytes);
  path_ends_.reserve(samples);
  labels_.reserve(samples);
  raw_sizes_.reserve(samples);
  versions_.reserve(samples);
}

void ManifestTable::Add(absl::string_view relative_path, uint32_t label, uint64_t raw_size,
                        uint32_t version) {
  paths_.append(relative_path.data(), relative_path.size());
  path_ends_.push_back(paths_.size());
  labels_.push_back(label);
  raw_sizes_.push_back(raw_size);
  versions_.push_back(version);
}

namespace {

// Shrinking copies the whole array: only worth it for a real gain.
template <typename T>
void ShrinkIfSpare(T& array) {
  if (array.capacity() - array.size() > array.size() / 8) array.shrink_to_fit();
}

}  // namespace

void ManifestTable::ShrinkToFit() {
  ShrinkIfSpare(paths_);
  ShrinkIfSpare(path_ends_);
  ShrinkIfSpare(labels_);
  ShrinkIfSpare(raw_sizes_);
  ShrinkIfSpare(versions_);
}

absl::string_view ManifestTable::relative_path(uint64_t id) const {
  const uint64_t begin = id == 0 ? 0 : path_ends_[id - 1];
  return absl::string_view(paths_.data() + begin, path_ends_[id] - begin);
}

ManifestEntry ManifestTable::entry(uint64_t id) const {
  ManifestEntry e;
  e.relative_path = std::string(relative_path(id));
  e.label = labels_[id];
  e.raw_size = raw_sizes_[id];
  e.version = versions_[id];
  return e;
}

size_t ManifestTable::memory_bytes() const {
  return paths_.capacity() + path_ends_.capacity() * sizeof(uint64_t) +
         labels_.capacity() * sizeof(uint32_t) + raw_sizes_.capacity() * sizeof(uint64_t) +
         versions_.capacity() * sizeof(uint32_t);
}

void ManifestHasher::Add(absl::string_view relative_path, uint64_t raw_size, uint32_t label) {
  h_ = Fnv1a(h_, relative_path.data(), relative_path.size());
  h_ = Fnv1a(h_, &raw_size, sizeof(raw_size));
  h_ = Fnv1a(h_, &label, sizeof(label));
}

uint64_t ManifestFingerprint(const std::vector<ManifestEntry>& entries) {
  ManifestHasher hasher;
  for (const ManifestEntry& e : entries) hasher.Add(e.relative_path, e.raw_size, e.label);
  return hasher.value();
}

}  // namespace sophon
