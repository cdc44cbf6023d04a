#include "client/loader/disk_sample_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/file_lock.h"
#include "sophon/data/crc32.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'O', 'P', 'H', 'C', 'A', 'C', '1'};
constexpr char kUsageFile[] = "usage";
constexpr char kInUseFile[] = "in-use";

struct Header {
  char magic[8];
  uint64_t fingerprint;
  uint64_t id;
  uint64_t size;
  uint32_t crc;
  uint32_t version;  // DiskSampleCacheOptions.versions when written; 0 = unknown
};
static_assert(sizeof(Header) == DiskSampleCache::kHeaderBytes);

bool PreadExact(int fd, void* data, size_t size, off_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, static_cast<char*>(data) + done, size - done,
                            offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A counter: 8 bytes at the start of a file; false when it holds none.
bool ReadCounter(int fd, int64_t* value) {
  return PreadExact(fd, value, sizeof(*value), 0) && *value >= 0;
}
bool WriteCounter(int fd, int64_t value) {
  return pwrite(fd, &value, sizeof(value), 0) == static_cast<ssize_t>(sizeof(value));
}

// A dataset folder's counter (kept under the node's flock); -1 when it holds none.
int64_t ReadFolderCounter(const std::string& folder) {
  const int fd = open((folder + "/" + kUsageFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t value = -1;
  if (!ReadCounter(fd, &value)) value = -1;
  close(fd);
  return value;
}
bool WriteFolderCounter(const std::string& folder, int64_t value) {
  const int fd =
      open((folder + "/" + kUsageFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = WriteCounter(fd, value);
  close(fd);
  return ok;
}

// An entry's file name: the decimal id, nothing else.
bool EntryId(const std::string& name, uint64_t* id) {
  if (name.empty() || name.size() > 20) return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  *id = std::strtoull(name.c_str(), nullptr, 10);
  return true;
}

// Reads the header of the entry file `fd` (`st` its stat) when it is one of
// this dataset's for sample `id`.
bool ReadHeader(int fd, const struct stat& st, uint64_t fingerprint, uint64_t id,
                Header* header) {
  return S_ISREG(st.st_mode) && st.st_size >= DiskSampleCache::kHeaderBytes &&
         PreadExact(fd, header, sizeof(*header), 0) &&
         std::memcmp(header->magic, kMagic, sizeof(kMagic)) == 0 &&
         header->fingerprint == fingerprint && header->id == id;
}

// The bytes a file at an entry's path counts for, the same whoever counts it
// (Put when it writes it, the count of a folder, the removal of a damaged
// one), so that the counters stay exact when a damaged entry is removed: its
// size as written when its header is this dataset's (a truncated entry
// counts what was written), else its size on disk, 0 when that cannot be an
// entry (not a regular file, larger than the bound).
int64_t CountedBytes(const struct stat& st, const Header* header, int64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) return 0;
  if (header != nullptr &&
      header->size <= static_cast<uint64_t>(max_bytes - DiskSampleCache::kHeaderBytes)) {
    return static_cast<int64_t>(header->size) + DiskSampleCache::kHeaderBytes;
  }
  return st.st_size >= DiskSampleCache::kHeaderBytes && st.st_size <= max_bytes ? st.st_size : 0;
}

// Counts a dataset folder's entries from their files (the sizes on disk).
// With `clean` (no other process has the folder open) it removes what cannot
// be an entry: temporary files, files that are not regular, shorter than a
// header or larger than `max_bytes`. The ids found go to *ids (may be null).
int64_t CountFolder(const std::string& folder, bool clean, int64_t max_bytes,
                    uint64_t fingerprint, std::vector<uint64_t>* ids) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& bucket : fs::directory_iterator(folder, ec)) {
    if (!bucket.is_directory(ec)) continue;
    for (const auto& item : fs::directory_iterator(bucket.path(), ec)) {
      const std::string path = item.path().string();
      uint64_t id = 0;
      struct stat st;
      if (!EntryId(item.path().filename().string(), &id) || lstat(path.c_str(), &st) != 0) {
        if (clean) unlink(path.c_str());  // a temporary file a killed process left
        continue;
      }
      int64_t counted = 0;
      if (S_ISREG(st.st_mode)) {
        Header header;
        const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        const bool ours = fd >= 0 && ReadHeader(fd, st, fingerprint, id, &header);
        if (fd >= 0) close(fd);
        counted = CountedBytes(st, ours ? &header : nullptr, max_bytes);
      }
      if (counted > 0) {
        bytes += counted;
        if (ids != nullptr) ids->push_back(id);
      } else if (clean) {
        unlink(path.c_str());  // cannot be an entry: a FIFO, a link, a huge file
      }
    }
  }
  return bytes;
}

// A dataset folder of DIR other than ours: its path and when it was last opened.
struct OtherDataset {
  std::string folder;
  fs::file_time_type last_used;
  int64_t bytes = 0;  // its count (filled by Open)
};

std::vector<OtherDataset> OtherDatasets(const std::string& dir, const std::string& ours) {
  std::vector<OtherDataset> others;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    if (!item.is_directory(ec) || name.size() != 16 || item.path().string() == ours ||
        name.find_first_not_of("0123456789abcdef") != std::string::npos) {
      continue;
    }
    std::error_code time_ec;
    fs::file_time_type used = fs::last_write_time(item.path() / kInUseFile, time_ec);
    if (time_ec) used = fs::last_write_time(item.path(), time_ec);
    others.push_back({item.path().string(), used, 0});
  }
  std::sort(others.begin(), others.end(), [](const OtherDataset& a, const OtherDataset& b) {
    return a.last_used < b.last_used;
  });
  return others;
}

// The fingerprint a dataset folder is named after.
uint64_t FolderFingerprint(const std::string& folder) {
  return std::strtoull(fs::path(folder).filename().string().c_str(), nullptr, 16);
}

// An exclusive flock on `folder`'s in-use file when no process holds it: its
// fd, else -1. Closing the fd releases it.
int LockUnused(const std::string& folder) {
  const int fd = open((folder + "/" + kInUseFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

absl::Status DiskSampleCacheOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("DiskSampleCacheOptions.dir is empty");
  if (max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskSampleCacheOptions.max_bytes must be > 0 (got ", max_bytes, ")"));
  }
  if (dataset_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DiskSampleCacheOptions.dataset_bytes must be >= 0 (got ", dataset_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskSampleCache>> DiskSampleCache::Open(
    const DiskSampleCacheOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const std::string folder = absl::StrFormat("%s/%016x", options.dir, options.fingerprint);
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the sample cache folder '",
                                                    options.dir, "': ", ec.message()));
  }
  // Everything below under the node's lock: a dataset is never reclaimed
  // while another process opens it.
  absl::StatusOr<FileLock> node = FileLock::Acquire(options.dir + "/" + kUsageFile);
  if (!node.ok()) return node.status();
  fs::create_directories(folder, ec);
  // Another user of the machine cannot read the samples.
  if (!ec) fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace, ec);
  for (int b = 0; b < 256 && !ec; ++b) {
    fs::create_directories(absl::StrFormat("%s/%02x", folder, b), ec);
  }
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the sample cache folder '", folder, "': ", ec.message()));
  }
  const int in_use = open((folder + "/" + kInUseFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (in_use < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open '", folder, "/", kInUseFile,
                                                    "': ", std::strerror(errno)));
  }
  std::unique_ptr<DiskSampleCache> cache(new DiskSampleCache(options, folder, in_use));
  const bool alone = flock(in_use, LOCK_EX | LOCK_NB) == 0;
  futimens(in_use, nullptr);  // last used: now

  // This dataset's usage: counted again from the files when no other process
  // has it open (the counter may have drifted: a process killed mid-write).
  std::vector<uint64_t> found;
  const int64_t saved = ReadFolderCounter(folder);
  const int64_t mine = CountFolder(folder, alone, options.max_bytes, options.fingerprint, &found);
  if (alone || saved < 0) WriteFolderCounter(folder, mine);
  const int64_t counted_mine = alone || saved < 0 ? mine : saved;
  // The node's usage: every dataset folder's count, summed again at each
  // open (a folder of an earlier version without a count is counted).
  std::vector<OtherDataset> others = OtherDatasets(options.dir, folder);  // oldest first
  int64_t usage = counted_mine;
  for (OtherDataset& other : others) {
    int64_t bytes = ReadFolderCounter(other.folder);
    if (bytes < 0) {
      const int unused = LockUnused(other.folder);
      bytes = CountFolder(other.folder, unused >= 0, options.max_bytes,
                          FolderFingerprint(other.folder), nullptr);
      WriteFolderCounter(other.folder, bytes);
      if (unused >= 0) close(unused);
    }
    other.bytes = bytes;
    usage += bytes;
  }
  // Room for this dataset: the folders of datasets opened longest ago that no
  // process has open go first.
  const int64_t wanted =
      std::min(options.max_bytes, std::max<int64_t>(0, options.dataset_bytes - counted_mine));
  uint64_t reclaimed = 0;
  if (usage + wanted > options.max_bytes) {
    for (const OtherDataset& other : others) {
      if (usage + wanted <= options.max_bytes) break;
      const int unused = LockUnused(other.folder);
      if (unused < 0) continue;  // in use by a job now
      fs::remove_all(other.folder, ec);
      close(unused);
      if (ec) {
        spdlog::warn("sample cache on disk: cannot reclaim '{}': {}", other.folder,
                     ec.message());
        continue;
      }
      usage = std::max<int64_t>(0, usage - other.bytes);
      ++reclaimed;
      spdlog::info("sample cache on disk: reclaimed '{}' ({:.1f} MB), the dataset opened "
                   "longest ago, for room",
                   other.folder, other.bytes / 1e6);
    }
  }
  WriteCounter(node->fd(), usage);
  flock(in_use, LOCK_SH);  // held until the cache goes: in use
  {
    absl::MutexLock lock(&cache->mu_);
    for (uint64_t id : found) {
      if (id < options.num_samples) cache->known_[id] = 1;
    }
    cache->stats_.usage_bytes = usage;
    cache->stats_.reclaimed_datasets = reclaimed;
  }
  spdlog::info("sample cache on disk: {} holds {} entries, {:.1f} MB; the folder {:.1f} of "
               "{:.1f} MB",
               folder, found.size(), counted_mine / 1e6, usage / 1e6, options.max_bytes / 1e6);
  return cache;
}

DiskSampleCache::~DiskSampleCache() {
  // On tmpfs (/dev/shm) the entries are memory: the last process to leave a
  // dataset's folder removes it. Under the node's lock, as Open, so that no
  // process opens the folder meanwhile; our shared lock becomes exclusive
  // only when no other process holds one.
  struct statfs fs_info;
  if (statfs(folder_.c_str(), &fs_info) == 0 && fs_info.f_type == TMPFS_MAGIC) {
    absl::StatusOr<FileLock> node = FileLock::Acquire(options_.dir + "/" + kUsageFile);
    if (node.ok() && flock(in_use_fd_, LOCK_EX | LOCK_NB) == 0) {
      const int64_t bytes = std::max<int64_t>(ReadFolderCounter(folder_), 0);
      std::error_code ec;
      fs::remove_all(folder_, ec);
      int64_t usage = 0;
      if (!ec && ReadCounter(node->fd(), &usage)) {
        WriteCounter(node->fd(), std::max<int64_t>(0, usage - bytes));
      }
      if (!ec) spdlog::info("sample cache in memory (tmpfs): removed '{}', its last user", folder_);
    }
  }
  close(in_use_fd_);
}

std::string DiskSampleCache::EntryPath(uint64_t id) const {
  return absl::StrFormat("%s/%02x/%d", folder_, id % 256, id);
}

int64_t DiskSampleCache::AddUsage(int64_t delta) const {
  absl::StatusOr<FileLock> lock = FileLock::Acquire(options_.dir + "/" + kUsageFile);
  if (!lock.ok()) return -1;
  int64_t usage = 0;
  if (!ReadCounter(lock->fd(), &usage)) usage = 0;
  if (delta > 0 && usage + delta > options_.max_bytes) return -1;
  usage = std::max<int64_t>(0, usage + delta);
  int64_t mine = ReadFolderCounter(folder_);
  if (!WriteCounter(lock->fd(), usage) ||
      !WriteFolderCounter(folder_, std::max<int64_t>(0, std::max<int64_t>(mine, 0) + delta))) {
    return -1;
  }
  return usage;
}

int64_t DiskSampleCache::ReadUsage() const {
  absl::StatusOr<FileLock> lock = FileLock::Acquire(options_.dir + "/" + kUsageFile);
  if (!lock.ok()) return -1;
  int64_t usage = 0;
  return ReadCounter(lock->fd(), &usage) ? usage : -1;
}

void DiskSampleCache::MarkKnown(uint64_t id, bool known) const {
  absl::MutexLock lock(&mu_);
  if (id < known_.size()) known_[id] = known ? 1 : 0;
}

void DiskSampleCache::Drop(const std::string& path, int64_t bytes, uint64_t id, Dropped why) {
  // Its bytes no longer counted: what the file took, as the folder's count has it.
  if (unlink(path.c_str()) == 0 && bytes > 0) AddUsage(-bytes);
  absl::MutexLock lock(&mu_);
  if (why == Dropped::kDamaged) {
    ++stats_.corrupt;
  } else {
    ++stats_.stale;
  }
  if (why != Dropped::kStaleOnWrite) ++stats_.misses;
  if (id < known_.size()) known_[id] = 0;
}

bool DiskSampleCache::CurrentVersion(uint64_t id, uint32_t version) const {
  const uint32_t want = id < options_.versions.size() ? options_.versions[id] : 0;
  return want == 0 || version == want;
}

bool DiskSampleCache::Get(uint64_t id, std::string* out, uint32_t* crc) {
  const std::string path = EntryPath(id);
  // Non-blocking: a FIFO at the path does not wait for a writer; no link followed.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {  // a symbolic link: not an entry
      Drop(path, 0, id, Dropped::kDamaged);
      return false;
    }
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
    if (id < known_.size()) known_[id] = 0;
    return false;
  }
  struct stat st;
  Header header;
  const bool stated = fstat(fd, &st) == 0;
  // Checked before the bytes are read: the type, the header against this
  // dataset and sample, the size against the header and the bound.
  const bool ours = stated && ReadHeader(fd, st, options_.fingerprint, id, &header);
  // Written for another version of the sample's file: it changed since.
  const bool stale = ours && !CurrentVersion(id, header.version);
  bool ok = ours && !stale && st.st_size <= options_.max_bytes &&
            header.size == static_cast<uint64_t>(st.st_size - kHeaderBytes);
  if (ok) {
    out->resize(header.size);
    ok = PreadExact(fd, out->data(), out->size(), kHeaderBytes) && header.crc == Crc32(*out);
  }
  close(fd);
  if (!ok) {
    out->clear();
    Drop(path, stated ? CountedBytes(st, ours ? &header : nullptr, options_.max_bytes) : 0, id,
         stale ? Dropped::kStale : Dropped::kDamaged);
    return false;
  }
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
    if (filling_stopped_) {
      ++stats_.rejected;
      return false;
    }
  }
  const std::string path = EntryPath(id);
  if (const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
      fd >= 0) {
    struct stat st;
    Header header;
    const bool ours = fstat(fd, &st) == 0 && ReadHeader(fd, st, options_.fingerprint, id, &header);
    close(fd);
    if (ours && CurrentVersion(id, header.version)) {  // another process wrote it
      MarkKnown(id, true);
      return true;
    }
    // Stale or damaged: removed (its bytes leave the count) and written anew.
    Drop(path, CountedBytes(st, ours ? &header : nullptr, options_.max_bytes), id,
         ours ? Dropped::kStaleOnWrite : Dropped::kDamaged);
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
  header.version = id < options_.versions.size() ? options_.versions[id] : 0;
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
    ++stats_.write_errors;
    ++stats_.rejected;
    if (!filling_stopped_) {
      filling_stopped_ = true;
      spdlog::warn("sample cache on disk: cannot write sample {} into '{}': {}; the cache "
                   "stops filling (it serves the {} entries it has written or found)",
                   id, folder_, std::string(status.message()), stats_.written);
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
  {
    absl::MutexLock lock(&mu_);
    if (id >= known_.size()) return false;
    if (known_[id]) return true;
  }
  // Written by another process of the node since?
  struct stat st;
  const std::string path = EntryPath(id);
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < kHeaderBytes) {
    return false;
  }
  MarkKnown(id, true);
  return true;
}

int64_t DiskSampleCache::RoomBytes() const {
  {
    absl::MutexLock lock(&mu_);
    if (filling_stopped_) return 0;
  }
  return std::max<int64_t>(0, options_.max_bytes - stats().usage_bytes);
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
