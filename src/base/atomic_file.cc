#include "sophon/base/atomic_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Open(const std::string& path) {
  std::string temp = path + ".tmp.XXXXXX";
  std::vector<char> name(temp.begin(), temp.end());
  name.push_back('\0');
  const int fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(
        err, absl::StrCat("cannot create '", temp, "' to write '", path, "'"));
  }
  temp.assign(name.data());
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, std::move(temp), fd));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(temp_path_.c_str());
}

absl::Status AtomicFileWriter::Fail(int error_number, const std::string& what) {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  unlink(temp_path_.c_str());
  error_ = absl::ErrnoToStatus(error_number, what);
  return error_;
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (!error_.ok()) return error_;
  if (committed_ || fd_ < 0) return absl::FailedPreconditionError("the file is already committed");
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = write(fd_, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return Fail(errno, absl::StrCat("cannot write '", temp_path_, "'"));
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit(Sync sync) {
  if (!error_.ok()) return error_;
  if (committed_ || fd_ < 0) return absl::FailedPreconditionError("the file is already committed");
  if (sync == Sync::kDurable && fsync(fd_) != 0) {
    return Fail(errno, absl::StrCat("cannot fsync '", temp_path_, "'"));
  }
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) return Fail(errno, absl::StrCat("cannot close '", temp_path_, "'"));
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return Fail(errno, absl::StrCat("cannot rename '", temp_path_, "' to '", path_, "'"));
  }
  committed_ = true;
  if (sync == Sync::kAtomicOnly) return absl::OkStatus();
  // The rename is durable once the folder's entry is on disk.
  const std::string folder = FolderOf(path_);
  const int dir = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0 || fsync(dir) != 0) {
    const int err = errno;
    if (dir >= 0) close(dir);
    error_ = absl::ErrnoToStatus(
        err, absl::StrCat("'", path_, "' is written but its folder '", folder,
                          "' could not be synced"));
    return error_;
  }
  close(dir);
  return absl::OkStatus();
}

}  // namespace sophon
