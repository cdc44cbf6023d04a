#include "sophon/data/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sophon/base/escape.h"
#include "sophon/base/status_macros.h"
#include "sophon/data/sample_source.h"

namespace sophon {
namespace {

uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  const std::string message =
      absl::StrCat(what, " '", EscapeName(path), "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

// An open read-only file, closed on destruction.
class File {
 public:
  static absl::StatusOr<File> Open(const std::string& path) {
    // O_NONBLOCK: a FIFO swapped in for a sample must not block the open.
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("cannot open", path, errno);
    File f(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoError("cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", EscapeName(path), "' is not a regular file"));
    }
    f.size_ = static_cast<uint64_t>(st.st_size);
    return f;
  }
  File(File&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  File& operator=(File&&) = delete;
  ~File() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  explicit File(int fd) : fd_(fd) {}
  int fd_;
  uint64_t size_ = 0;
};

// Adds one file's pages to `r`.
absl::Status AddResidency(const std::string& path, CacheResidency* r) {
  ASSIGN_OR_RETURN(File f, File::Open(path));
  const uint64_t page = r->page_size;
  r->files += 1;
  r->bytes += f.size();
  if (f.size() == 0) return absl::OkStatus();
  const uint64_t pages = (f.size() + page - 1) / page;
  void* addr = mmap(nullptr, f.size(), PROT_READ, MAP_SHARED, f.fd(), 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot mmap", path, errno);
  absl::Cleanup unmap = [addr, &f] { munmap(addr, f.size()); };
  std::vector<unsigned char> vec(pages);
  if (mincore(addr, f.size(), vec.data()) != 0) return ErrnoError("mincore failed on", path, errno);
  r->pages += pages;
  r->resident_pages += std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; });
  return absl::OkStatus();
}

absl::Status EvictOne(const std::string& path) {
  ASSIGN_OR_RETURN(File f, File::Open(path));
  // Dirty pages cannot be dropped; write them back first (fails harmlessly
  // on filesystems without writeback).
  fdatasync(f.fd());
  const int err = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_DONTNEED);
  if (err != 0) return ErrnoError("posix_fadvise(DONTNEED) failed on", path, err);
  return absl::OkStatus();
}

absl::Status WarmOne(const std::string& path, std::vector<char>* buffer) {
  ASSIGN_OR_RETURN(File f, File::Open(path));
  posix_fadvise(f.fd(), 0, 0, POSIX_FADV_WILLNEED);  // a hint; reading below is what counts
  while (true) {
    const ssize_t n = read(f.fd(), buffer->data(), buffer->size());
    if (n == 0) return absl::OkStatus();
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
  }
}

}  // namespace

uint64_t CacheResidency::resident_bytes() const {
  return std::min(bytes, resident_pages * page_size);
}

absl::StatusOr<CacheResidency> MeasureResidency(const std::vector<std::string>& paths) {
  CacheResidency r;
  r.page_size = PageSize();
  for (const std::string& path : paths) RETURN_IF_ERROR(AddResidency(path, &r));
  return r;
}

absl::StatusOr<CacheResidency> EvictFromPageCache(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) RETURN_IF_ERROR(EvictOne(path));
  return MeasureResidency(paths);
}

absl::StatusOr<CacheResidency> WarmPageCache(const std::vector<std::string>& paths) {
  std::vector<char> buffer(1 << 20);
  for (const std::string& path : paths) RETURN_IF_ERROR(WarmOne(path, &buffer));
  return MeasureResidency(paths);
}

std::vector<std::string> DatasetFilePaths(const SampleSource& source) {
  return source.FilePaths();
}

std::string FormatResidency(const CacheResidency& r) {
  return absl::StrFormat("%d files, %.1f MB, %.1f MB resident (%.1f%%)", r.files, r.bytes / 1e6,
                         r.resident_bytes() / 1e6, 100 * r.fraction());
}

}  // namespace sophon
