#include "client/loader/batch_share.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "sophon/base/file_lock.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'S', 'O', 'P', 'H', 'B', 'T', 'C', 'H'};
constexpr uint32_t kVersion = 1;
constexpr char kInUseFile[] = "in-use";

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t key;
  uint64_t seq;
  uint64_t payload_bytes;
};
static_assert(sizeof(Header) == 40);

template <typename Part>
uint64_t TotalBytes(absl::Span<const Part> parts) {
  uint64_t total = 0;
  for (const Part& p : parts) total += p.size();
  return total;
}

// Reads or writes every byte of `iov` at the file's current offset (readv
// and writev may stop short). false on an error or end of file.
template <typename Fn>
bool TransferAll(Fn io, int fd, std::vector<iovec> iov) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = io(fd, iov.data() + first, count);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

// The seq a file of the folder is named after; false for other files.
bool ParseSeq(const std::string& name, uint64_t* seq) {
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 16) return false;
  uint64_t value = 0;
  for (size_t i = 0; i < dot; ++i) {
    const char c = name[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  *seq = value;
  return true;
}

// The names in `folder` (none if it cannot be listed); never throws.
std::vector<std::string> ListFolder(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  return names;
}

// Removes every file of `folder` but the in-use file.
void RemoveBatchFiles(const std::string& folder) {
  for (const std::string& name : ListFolder(folder)) {
    if (name != kInUseFile) unlink((folder + "/" + name).c_str());
  }
}

// Makes `folder` (mode 0700) if missing and checks that it is a folder of
// this user that no one else can open.
absl::Status OwnFolder(const std::string& folder) {
  if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", folder, "': ", std::strerror(errno)));
  }
  struct stat st;
  if (lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", folder, "' is not a folder; shared batches need one"));
  }
  // Another user of the machine can neither read the batches nor plant one.
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "'%s' belongs to uid %d with mode %o: shared batches need a folder of this user (uid "
        "%d) that no one else can open; remove it or choose another --share-batches-dir",
        folder, st.st_uid, st.st_mode & 0777, geteuid()));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t StableDigest(std::string_view text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

absl::Status BatchShareOptions::Validate() const {
  if (window_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchShareOptions.window_bytes must be > 0 (got ", window_bytes, ")"));
  }
  if (max_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("BatchShareOptions.max_wait must be >= 0 (got ",
                                                   absl::FormatDuration(max_wait), ")"));
  }
  return absl::OkStatus();
}

BatchShare::Claim& BatchShare::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void BatchShare::Claim::Release() {
  if (fd_ >= 0) close(fd_);  // drops the flock
  fd_ = -1;
}

absl::StatusOr<std::unique_ptr<BatchShare>> BatchShare::Open(const BatchShareOptions& options,
                                                             uint64_t key) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) {
    return absl::InvalidArgumentError("BatchShareOptions.dir is empty");
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the shared batches folder '",
                                                    options.dir, "': ", ec.message()));
  }
  // This user's folder: everything below it is out of other users' reach
  // (the lock files included).
  const std::string mine = absl::StrFormat("%s/sophon-%d", options.dir, geteuid());
  if (absl::Status s = OwnFolder(mine); !s.ok()) return s;
  const std::string folder = absl::StrFormat("%s/%016x", mine, key);
  // Opening and leaving are serialized per key, so a folder is never removed
  // while another process opens it. The lock file stays (empty).
  absl::StatusOr<FileLock> lock = FileLock::Acquire(folder + ".lock");
  if (!lock.ok()) return lock.status();
  if (absl::Status s = OwnFolder(folder); !s.ok()) return s;
  const int in_use =
      open((folder + "/" + kInUseFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (in_use < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open '", folder, "/", kInUseFile, "': ", std::strerror(errno)));
  }
  if (flock(in_use, LOCK_EX | LOCK_NB) == 0) {
    // The first process here: what a process killed earlier left goes.
    RemoveBatchFiles(folder);
  }
  // Held until this process leaves.
  while (flock(in_use, LOCK_SH) != 0) {
    if (errno != EINTR) {
      const std::string why = std::strerror(errno);
      close(in_use);
      return absl::PermissionDeniedError(
          absl::StrCat("cannot lock '", folder, "/", kInUseFile, "': ", why));
    }
  }
  return std::unique_ptr<BatchShare>(new BatchShare(options, folder, key, in_use));
}

BatchShare::~BatchShare() {
  absl::StatusOr<FileLock> lock = FileLock::Acquire(folder_ + ".lock");
  if (lock.ok() && flock(in_use_, LOCK_EX | LOCK_NB) == 0) {
    // The last process: the folder goes (on tmpfs, the memory it held).
    RemoveBatchFiles(folder_);
    unlink((folder_ + "/" + kInUseFile).c_str());
    rmdir(folder_.c_str());
  }
  close(in_use_);
}

std::string BatchShare::PathOf(uint64_t seq, const char* suffix) const {
  return absl::StrFormat("%s/%016x.%s", folder_, seq, suffix);
}

int BatchShare::TryRead(uint64_t seq, absl::Span<const absl::Span<char>> parts) const {
  const std::string path = PathOf(seq, "batch");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  const uint64_t payload = TotalBytes(parts);
  struct stat st;
  Header h;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<uint64_t>(st.st_size) == sizeof(Header) + payload &&
            pread(fd, &h, sizeof(h), 0) == static_cast<ssize_t>(sizeof(h)) &&
            std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.version == kVersion &&
            h.key == key_ && h.seq == seq && h.payload_bytes == payload;
  if (ok) {
    std::vector<iovec> iov;
    for (const absl::Span<char>& p : parts) iov.push_back({p.data(), p.size()});
    ok = lseek(fd, sizeof(Header), SEEK_SET) == static_cast<off_t>(sizeof(Header)) &&
         TransferAll(readv, fd, std::move(iov));
  }
  close(fd);
  if (ok) return 1;
  spdlog::warn("shared batches: '{}' does not match this job's batch ({} bytes expected); "
               "removed, the batch is made here",
               path, sizeof(Header) + payload);
  unlink(path.c_str());
  return -1;
}

BatchShare::Outcome BatchShare::Take(uint64_t seq, absl::Span<const absl::Span<char>> parts,
                                     Claim* claim, const std::function<bool()>& stopped) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.max_wait;
  bool waited = false;
  absl::Duration pause = absl::Milliseconds(1);
  auto done = [&](Outcome outcome, bool taken_over) {
    absl::MutexLock lock(&mu_);
    if (outcome == Outcome::kRead) stats_.read++;
    if (outcome == Outcome::kClaimed) stats_.claimed++;
    if (taken_over) stats_.taken_over++;
    if (waited) stats_.wait_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    return outcome;
  };
  while (true) {
    if (TryRead(seq, parts) == 1) return done(Outcome::kRead, false);
    const std::string path = PathOf(seq, "claim");
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      // Made here, not shared (Publish skips a claim not held).
      *claim = Claim();
      return done(Outcome::kClaimed, false);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Published between the look and the lock?
      if (TryRead(seq, parts) == 1) {
        close(fd);
        return done(Outcome::kRead, false);
      }
      *claim = Claim(fd);
      return done(Outcome::kClaimed, waited);
    }
    close(fd);
    waited = true;
    if (stopped()) return done(Outcome::kStopped, false);
    if (absl::Now() >= deadline) {
      // The job holding it is stopped or stuck: made here, not shared.
      spdlog::warn("shared batches: batch {} has been claimed by another job for {}; made "
                   "here (not shared)",
                   seq, absl::FormatDuration(options_.max_wait));
      {
        absl::MutexLock lock(&mu_);
        stats_.waited_out++;
      }
      *claim = Claim();
      return done(Outcome::kClaimed, false);
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(8));
  }
}

absl::Status BatchShare::Publish(uint64_t seq, absl::Span<const absl::Span<const char>> parts,
                                 Claim claim) {
  if (!claim.held()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (seq < window_start_) return absl::OkStatus();  // behind the window: no one wants it
  }
  const std::string path = PathOf(seq, "batch");
  const std::string temp = PathOf(seq, absl::StrCat("tmp.", getpid()).c_str());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the shared batch '", temp, "': ", std::strerror(errno)));
  }
  Header h;
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.reserved = 0;
  h.key = key_;
  h.seq = seq;
  h.payload_bytes = TotalBytes(parts);
  std::vector<iovec> iov;
  iov.push_back({&h, sizeof(h)});
  for (const absl::Span<const char>& p : parts) {
    iov.push_back({const_cast<char*>(p.data()), p.size()});
  }
  const bool written = TransferAll(writev, fd, std::move(iov));
  const int write_errno = errno;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(written ? errno : write_errno);
    unlink(temp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write the shared batch '", path, "': ", why));
  }
  claim.Release();
  const uint64_t start = Sweep();
  absl::MutexLock lock(&mu_);
  window_start_ = std::max(window_start_, start);
  stats_.published++;
  return absl::OkStatus();
}

uint64_t BatchShare::Sweep() {
  // The published batches, newest first, with their files' sizes.
  std::vector<std::pair<uint64_t, int64_t>> batches;
  const std::vector<std::string> names = ListFolder(folder_);
  for (const std::string& name : names) {
    uint64_t seq;
    struct stat st;
    if (absl::EndsWith(name, ".batch") && ParseSeq(name, &seq) &&
        stat((folder_ + "/" + name).c_str(), &st) == 0) {
      batches.emplace_back(seq, st.st_size);
    }
  }
  std::sort(batches.begin(), batches.end(), std::greater<>());
  int64_t kept_bytes = 0;
  // The oldest batch kept, when older ones do not fit: only then does
  // anything go. (While every batch fits, nothing is removed: a claim on an
  // older batch still being made, published out of order after a newer one,
  // must stay, or a waiting job would claim and make that batch again.)
  uint64_t start = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    kept_bytes += batches[i].second;
    if (i >= 2 && kept_bytes > options_.window_bytes) {
      start = batches[i - 1].first;
      break;
    }
  }
  if (start == 0) return 0;
  for (const std::string& name : names) {
    uint64_t seq;
    if (ParseSeq(name, &seq) && seq < start) unlink((folder_ + "/" + name).c_str());
  }
  return start;
}

BatchShareStats BatchShare::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace sophon
