#include "sophon/data/pack_source.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sophon/base/escape.h"
#include "src/data/pread_exact.h"
#include "src/data/symlink_policy.h"

namespace sophon {
namespace {

constexpr int64_t kMaxSampleBytesLimit = int64_t{1} << 30;
constexpr char kOption[] = "PackSourceOptions.follow_symlinks";
constexpr char kRootKind[] = "pack folder";

}  // namespace

absl::Status PackSourceOptions::Validate() const {
  if (max_sample_bytes < 1 || max_sample_bytes > kMaxSampleBytesLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackSourceOptions.max_sample_bytes must be in [1, ", kMaxSampleBytesLimit,
                     "] (a sample travels in one message), got ", max_sample_bytes));
  }
  if (group_buffer_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PackSourceOptions.group_buffer_bytes must be >= 0, got ", group_buffer_bytes));
  }
  if (max_index_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackSourceOptions.max_index_bytes must be >= 1, got ", max_index_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PackSource>> PackSource::Open(const std::string& dir,
                                                             const PackSourceOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<PackIndex> index =
      ReadPackIndex(dir, options.follow_symlinks, options.max_index_bytes);
  if (!index.ok()) return index.status();
  if (index->samples.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("pack ", dir, " holds no samples"));
  }
  std::unique_ptr<PackSource> source(new PackSource());
  source->dir_ = dir;
  source->options_ = options;
  source->group_size_ = index->group_size;
  source->source_fingerprint_ = index->source_fingerprint;
  absl::StatusOr<std::string> real_dir = SymlinkPolicy::ResolveRoot(dir, kRootKind);
  if (!real_dir.ok()) return real_dir.status();
  const SymlinkPolicy policy(options.follow_symlinks, *real_dir, kOption, kRootKind);
  std::vector<uint64_t> shard_bytes;
  for (const std::string& shard : index->shards) {
    const std::string path = absl::StrCat(dir, "/", shard);
    // Checked once here: the descriptor is what every read uses.
    absl::StatusOr<OpenedFile> file = policy.Open(path);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("pack ", dir, ": shard ", EscapeName(path), ": ",
                                       file.status().message()));
    }
    shard_bytes.push_back(static_cast<uint64_t>(file->st.st_size));
    source->fds_.push_back(file->fd.release());
    source->shards_.push_back(path);
  }
  for (const std::string& c : index->class_names) source->class_names_.push_back(EscapeName(c));
  ManifestHasher hasher;
  size_t path_bytes = 0;
  for (const PackedSample& s : index->samples) path_bytes += s.path.size();
  source->manifest_.Reserve(index->samples.size(), path_bytes);
  source->locations_.reserve(index->samples.size());
  for (size_t i = 0; i < index->samples.size(); ++i) {
    const PackedSample& s = index->samples[i];
    if (s.size > static_cast<uint64_t>(options.max_sample_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pack ", dir, ": sample ", i, " ('", EscapeName(s.path), "') has ", s.size,
          " bytes, over PackSourceOptions.max_sample_bytes (", options.max_sample_bytes, ")"));
    }
    if (s.offset + s.size > shard_bytes[s.shard]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pack ", dir, ": sample ", i, " ('", EscapeName(s.path), "') lies at bytes [", s.offset,
          ", ", s.offset + s.size, ") of shard ", index->shards[s.shard], ", which has ",
          shard_bytes[s.shard], " bytes (truncated shard?)"));
    }
    source->manifest_.Add(EscapeName(s.path), s.label, s.size, SampleVersionOfCrc(s.crc32));
    hasher.Add(s.path, s.size, s.label);
    source->locations_.push_back(Location{s.shard, s.crc32, s.offset});
  }
  source->fingerprint_ = hasher.value();
  return source;
}

PackSource::~PackSource() {
  for (int fd : fds_) ::close(fd);
}

std::string PackSource::name() const {
  absl::string_view d = dir_;
  while (d.size() > 1 && d.back() == '/') d.remove_suffix(1);
  const size_t slash = d.rfind('/');
  return EscapeName(slash == absl::string_view::npos ? d : d.substr(slash + 1));
}

std::vector<std::string> PackSource::FilePaths() const { return shards_; }

PackReadStats PackSource::read_stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::string PackSource::Describe(uint64_t id) const {
  const Location& at = locations_[id];
  return absl::StrCat("sample ", id, " ('", manifest_.relative_path(id), "', ",
                      EscapeName(shards_[at.shard]), " at offset ", at.offset, ")");
}

void PackSource::GroupRun(uint64_t id, uint64_t* first, uint64_t* end) const {
  const uint64_t g = group_size_;
  const uint32_t shard = locations_[id].shard;
  uint64_t lo = id / g * g;
  uint64_t hi = std::min<uint64_t>(lo + g, locations_.size());
  while (locations_[lo].shard != shard) ++lo;
  while (locations_[hi - 1].shard != shard) --hi;
  *first = lo;
  *end = hi;
}

absl::Status PackSource::ReadRange(uint32_t shard, uint64_t offset, uint64_t size,
                                   std::string* out) const {
  const PreadResult r = PreadExact(fds_[shard], offset, size, out);
  if (r.error != 0) {
    return absl::DataLossError(absl::StrCat("reading ", EscapeName(shards_[shard]), " at offset ",
                                            offset + r.bytes, ": ", std::strerror(r.error)));
  }
  if (r.bytes < size) {
    return absl::DataLossError(absl::StrCat(EscapeName(shards_[shard]), " ends at byte ",
                                            offset + r.bytes, ", before the ", offset + size,
                                            " its index names (truncated shard?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PackSource::Checked(uint64_t id, std::string bytes) const {
  const uint32_t crc = Crc32(bytes);
  if (crc != locations_[id].crc32) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum mismatch (CRC-32 %08x, the index says %08x): the shard is corrupt",
        Describe(id), crc, locations_[id].crc32));
  }
  return bytes;
}

absl::StatusOr<std::string> PackSource::ReadSample(uint64_t id) const {
  std::string bytes;
  if (absl::Status s = ReadRange(locations_[id].shard, locations_[id].offset,
                                 manifest_.raw_size(id), &bytes);
      !s.ok()) {
    return absl::DataLossError(absl::StrCat(Describe(id), ": ", s.message()));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.sample_reads;
  }
  return Checked(id, std::move(bytes));
}

void PackSource::Drop(uint64_t key) const {
  auto it = groups_.find(key);
  if (it == groups_.end()) return;
  GroupBuffer& g = *it->second;
  if (g.ready && g.status.ok()) lru_.erase(g.lru);
  buffered_bytes_ -= g.reserved;
  groups_.erase(it);
}

void PackSource::MakeRoom(uint64_t need) const {
  const uint64_t budget = static_cast<uint64_t>(options_.group_buffer_bytes);
  while (buffered_bytes_ + need > budget && !lru_.empty()) {
    const uint64_t key = lru_.front();
    if (groups_.at(key)->unread > 0) ++stats_.evicted;
    Drop(key);
  }
}

std::string PackSource::Take(const std::shared_ptr<GroupBuffer>& group, uint64_t id,
                             uint64_t first) const {
  GroupBuffer& g = *group;
  std::string bytes = g.bytes.substr(locations_[id].offset - g.begin, manifest_.raw_size(id));
  auto it = groups_.find(first);
  if (it == groups_.end() || it->second != group) return bytes;  // dropped while we waited
  const size_t k = id - first;
  if (!g.taken[k]) {
    g.taken[k] = true;
    --g.unread;
  }
  if (g.unread == 0) {
    Drop(first);
  } else {
    lru_.splice(lru_.end(), lru_, g.lru);
  }
  return bytes;
}

absl::StatusOr<std::string> PackSource::Read(uint64_t id) const {
  if (id >= locations_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", id, " is outside pack ", dir_, " (", locations_.size(),
                     " samples)"));
  }
  uint64_t first = 0, end = 0;
  GroupRun(id, &first, &end);
  const uint64_t begin = locations_[first].offset;
  const uint64_t extent = locations_[end - 1].offset + manifest_.raw_size(end - 1) - begin;
  if (end - first <= 1 || extent > static_cast<uint64_t>(options_.group_buffer_bytes)) {
    return ReadSample(id);
  }
  std::shared_ptr<GroupBuffer> group;
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = groups_.find(first);
    if (it != groups_.end()) {
      group = it->second;
      mu_.Await(absl::Condition(&group->ready));
      ++stats_.shared;
      if (!group->status.ok()) {
        return absl::DataLossError(absl::StrCat(Describe(id), ": ", group->status.message()));
      }
      std::string bytes = Take(group, id, first);
      lock.Release();
      return Checked(id, std::move(bytes));
    }
    MakeRoom(extent);
    if (buffered_bytes_ + extent > static_cast<uint64_t>(options_.group_buffer_bytes)) {
      lock.Release();
      return ReadSample(id);  // every buffer is being read: no room to share
    }
    group = std::make_shared<GroupBuffer>();
    group->begin = begin;
    group->reserved = extent;
    group->unread = end - first;
    group->taken.assign(end - first, false);
    buffered_bytes_ += extent;
    groups_.emplace(first, group);
  }
  std::string bytes;
  absl::Status read = ReadRange(locations_[id].shard, begin, extent, &bytes);
  absl::ReleasableMutexLock lock(&mu_);
  ++stats_.group_reads;
  group->ready = true;
  if (!read.ok()) {
    group->status = read;
    Drop(first);  // the next reader tries again
    return absl::DataLossError(absl::StrCat(Describe(id), ": ", read.message()));
  }
  group->bytes = std::move(bytes);
  lru_.push_back(first);
  group->lru = std::prev(lru_.end());
  std::string mine = Take(group, id, first);
  lock.Release();
  return Checked(id, std::move(mine));
}

}  // namespace sophon
