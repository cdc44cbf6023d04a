#include "sophon/base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace sophon {

int FileLock::Open(const std::string& path, absl::Status* error) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) *error = absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "'"));
  return fd;
}

bool FileLock::Lock(int fd, bool block) {
  while (flock(fd, LOCK_EX | (block ? 0 : LOCK_NB)) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);  // closing the descriptor releases the lock
}

}  // namespace sophon
