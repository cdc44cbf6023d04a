// An exclusive advisory lock on a file (flock), held by one process of those
// that take it at a time and released when the object goes (or the process
// ends). For work that several processes of a node would otherwise repeat at
// once: the ranks of a node profiling one dataset.
#ifndef SOPHON_BASE_FILE_LOCK_H_
#define SOPHON_BASE_FILE_LOCK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sophon {

class FileLock {
 public:
  // Creates `path` if needed and waits until this process holds its lock;
  // `waiting` (if set) is called once when another process holds it. Errors
  // name the file.
  template <typename OnWait>
  static absl::StatusOr<FileLock> Acquire(const std::string& path, OnWait waiting);
  static absl::StatusOr<FileLock> Acquire(const std::string& path) {
    return Acquire(path, [] {});
  }

  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  // The locked file, open for reading and writing (a counter kept in it).
  int fd() const { return fd_; }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  // Opens `path`; -1 and *error on failure.
  static int Open(const std::string& path, absl::Status* error);
  // Takes the lock; `block` false: false at once when another holds it.
  static bool Lock(int fd, bool block);

  int fd_ = -1;
};

template <typename OnWait>
absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, OnWait waiting) {
  absl::Status error;
  const int fd = Open(path, &error);
  if (fd < 0) return error;
  FileLock lock(fd);
  if (!Lock(fd, /*block=*/false)) {
    waiting();
    if (!Lock(fd, /*block=*/true)) {
      return absl::InternalError(absl::StrCat("cannot lock '", path, "'"));
    }
  }
  return lock;
}

}  // namespace sophon

#endif  // SOPHON_BASE_FILE_LOCK_H_
