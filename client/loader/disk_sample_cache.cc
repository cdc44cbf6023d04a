#include "client/loader/disk_sample_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/file_lock.h"
#include "sophon/data/crc32.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

constexpr char kMagic[8] = {'S', 'O', 'P', 'H', 'C', 'A', 'C', '1'};

struct Header {
  char magic[8];
  uint64_t fingerprint;
  uint64_t id;
  uint64_t size;
  uint32_t crc;
  uint32_t reserved;
};
static_assert(sizeof(Header) == DiskSampleCache::kHeaderBytes);

// Reads all of `fd` into *out; false on an error.
bool ReadAll(int fd, std::string* out) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0) return false;
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = pread(fd, out->data() + done, out->size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The folder's usage counter (8 bytes at the start of DIR/<fingerprint>/usage), read
// through `fd` under its flock; false when it holds no valid count.
bool ReadUsageCounter(int fd, int64_t* usage) {
  return pread(fd, usage, sizeof(*usage), 0) == static_cast<ssize_t>(sizeof(*usage)) &&
         *usage >= 0;
}

}  // namespace

absl::Status DiskSampleCacheOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("DiskSampleCacheOptions.dir is empty");
  if (max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskSampleCacheOptions.max_bytes must be > 0 (got ", max_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskSampleCache>> DiskSampleCache::Open(
    const DiskSampleCacheOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const std::string folder = absl::StrFormat("%s/%016x", options.dir, options.fingerprint);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the sample cache folder '",
                                                    folder, "': ", ec.message()));
  }
  for (int b = 0; b < 256; ++b) {
    std::filesystem::create_directories(absl::StrFormat("%s/%02x", folder, b), ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create folders in '", folder,
                                                      "': ", ec.message()));
    }
  }
  std::unique_ptr<DiskSampleCache> cache(new DiskSampleCache(options, folder));
  // What is there already: the entries this process will know of, and the
  // usage counter when there is none (the first process to open the folder
  // sums it under the lock).
  int64_t found_bytes = 0;
  std::vector<uint64_t> found;
  for (const auto& bucket : std::filesystem::directory_iterator(folder, ec)) {
    if (!bucket.is_directory()) continue;
    for (const auto& entry : std::filesystem::directory_iterator(bucket.path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find('.') != std::string::npos) continue;  // temporary files
      char* end = nullptr;
      const unsigned long long id = std::strtoull(name.c_str(), &end, 10);
      if (end == name.c_str() || *end != '\0') continue;
      found_bytes += static_cast<int64_t>(entry.file_size(ec));
      found.push_back(id);
    }
  }
  {
    absl::MutexLock lock(&cache->mu_);
    for (uint64_t id : found) {
      if (id < options.num_samples) cache->known_[id] = 1;
    }
  }
  int64_t usage = -1;
  {
    absl::StatusOr<FileLock> lock = FileLock::Acquire(folder + "/usage");
    if (!lock.ok()) return lock.status();
    if (!ReadUsageCounter(lock->fd(), &usage)) {
      usage = found_bytes;
      (void)!pwrite(lock->fd(), &usage, sizeof(usage), 0);
    }
  }
  {
    absl::MutexLock lock(&cache->mu_);
    cache->stats_.usage_bytes = usage;
  }
  spdlog::info("sample cache on disk: {} holds {} entries, {:.1f} of {:.1f} MB", folder,
               found.size(),
               usage / 1e6, options.max_bytes / 1e6);
  return cache;
}

std::string DiskSampleCache::EntryPath(uint64_t id) const {
  return absl::StrFormat("%s/%02x/%d", folder_, id % 256, id);
}

int64_t DiskSampleCache::AddUsage(int64_t delta) {
  absl::StatusOr<FileLock> lock = FileLock::Acquire(folder_ + "/usage");
  if (!lock.ok()) return -1;
  const int fd = lock->fd();
  int64_t usage = 0;
  if (!ReadUsageCounter(fd, &usage)) usage = 0;
  if (delta > 0 && usage + delta > options_.max_bytes) return -1;
  usage = std::max<int64_t>(0, usage + delta);
  if (pwrite(fd, &usage, sizeof(usage), 0) != static_cast<ssize_t>(sizeof(usage))) return -1;
  return usage;
}

int64_t DiskSampleCache::ReadUsage() const {
  absl::StatusOr<FileLock> lock = FileLock::Acquire(folder_ + "/usage");
  if (!lock.ok()) return -1;
  int64_t usage = 0;
  return ReadUsageCounter(lock->fd(), &usage) ? usage : -1;
}

bool DiskSampleCache::Get(uint64_t id, std::string* out, uint32_t* crc) {
  const std::string path = EntryPath(id);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
    if (id < known_.size()) known_[id] = 0;
    return false;
  }
  std::string file;
  const bool read = ReadAll(fd, &file);
  close(fd);
  Header header;
  bool ok = read && file.size() >= sizeof(Header);
  if (ok) {
    std::memcpy(&header, file.data(), sizeof(Header));
    const absl::string_view bytes = absl::string_view(file).substr(sizeof(Header));
    ok = std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 &&
         header.fingerprint == options_.fingerprint && header.id == id &&
         header.size == bytes.size() && header.crc == Crc32(bytes);
  }
  if (!ok) {
    // Damaged or not ours: removed, its bytes no longer counted.
    if (unlink(path.c_str()) == 0) AddUsage(-static_cast<int64_t>(file.size()));
    absl::MutexLock lock(&mu_);
    ++stats_.corrupt;
    ++stats_.misses;
    if (id < known_.size()) known_[id] = 0;
    return false;
  }
  out->assign(file, sizeof(Header), std::string::npos);
  if (crc != nullptr) *crc = header.crc;
  absl::MutexLock lock(&mu_);
  ++stats_.hits;
  if (id < known_.size()) known_[id] = 1;
  return true;
}

bool DiskSampleCache::Put(uint64_t id, absl::string_view bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (id < known_.size() && known_[id]) return true;
  }
  const std::string path = EntryPath(id);
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {  // another process wrote it
    absl::MutexLock lock(&mu_);
    if (id < known_.size()) known_[id] = 1;
    return true;
  }
  const int64_t size = static_cast<int64_t>(sizeof(Header) + bytes.size());
  const int64_t usage = AddUsage(size);
  if (usage < 0) {
    absl::MutexLock lock(&mu_);
    ++stats_.rejected;
    return false;
  }
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.fingerprint = options_.fingerprint;
  header.id = id;
  header.size = bytes.size();
  header.crc = Crc32(bytes);
  absl::Status status;
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Open(path);
  if (!writer.ok()) {
    status = writer.status();
  } else {
    status = (*writer)->Append(&header, sizeof(header));
    if (status.ok()) status = (*writer)->Append(bytes.data(), bytes.size());
    if (status.ok()) status = (*writer)->Commit(AtomicFileWriter::Sync::kAtomicOnly);
  }
  if (!status.ok()) {
    AddUsage(-size);
    absl::MutexLock lock(&mu_);
    if (!write_error_logged_) {
      write_error_logged_ = true;
      spdlog::warn("sample cache on disk: cannot write sample {}: {} (further errors not logged)",
                   id, std::string(status.message()));
    }
    return false;
  }
  absl::MutexLock lock(&mu_);
  ++stats_.written;
  stats_.usage_bytes = usage;
  if (id < known_.size()) known_[id] = 1;
  return true;
}

bool DiskSampleCache::Contains(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return id < known_.size() && known_[id];
}

DiskSampleCacheStats DiskSampleCache::stats() const {
  // The other processes of the node (ranks, later jobs) write to the same folder: its
  // usage is the shared counter's now, not as this process last wrote it.
  const int64_t usage = ReadUsage();
  absl::MutexLock lock(&mu_);
  DiskSampleCacheStats stats = stats_;
  if (usage >= 0) stats.usage_bytes = usage;
  return stats;
}

}  // namespace sophon
