#include "src/data/symlink_policy.h"

#include <fcntl.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sophon/base/escape.h"

namespace sophon {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<FollowSymlinks> ParseFollowSymlinks(absl::string_view text) {
  if (text == "inside") return FollowSymlinks::kInside;
  if (text == "all") return FollowSymlinks::kAll;
  return absl::InvalidArgumentError(absl::StrCat(
      "ImageFolderOptions.follow_symlinks must be inside or all, got '", EscapeName(text), "'"));
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

std::string OpenedPath(int fd) {
  char buf[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) {
    if (n > 0) errno = ENAMETOOLONG;
    return "";
  }
  return std::string(buf, static_cast<size_t>(n));
}

bool IsUnder(absl::string_view real, absl::string_view real_root) {
  if (real_root == "/") return real.size() > 1 && real[0] == '/';
  return real.size() > real_root.size() + 1 && absl::StartsWith(real, real_root) &&
         real[real_root.size()] == '/';
}

absl::StatusOr<std::string> SymlinkPolicy::ResolveRoot(const std::string& root,
                                                       absl::string_view root_kind) {
  std::string real = RealPath(root);
  if (real.empty()) {
    const int e = errno;
    return absl::Status(e == ENOENT ? absl::StatusCode::kNotFound
                                    : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("cannot resolve the ", root_kind, " '", EscapeName(root),
                                     "': ", std::strerror(e)));
  }
  return real;
}

bool SymlinkPolicy::Allowed(const std::string& path, bool linked, std::string* real) const {
  if (follow_ != FollowSymlinks::kInside || !linked) return true;
  *real = RealPath(path);
  if (real->empty()) return false;  // a dangling link: nothing to serve
  return IsUnder(*real, real_root_);
}

absl::StatusOr<OpenedFile> SymlinkPolicy::Open(const std::string& path) const {
  OpenedFile file;
  // O_NONBLOCK: opening a FIFO swapped in for the file must not wait for a writer.
  file.fd = ScopedFd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (file.fd.get() < 0) {
    const int e = errno;
    return absl::Status(e == ENOENT || e == ENOTDIR ? absl::StatusCode::kNotFound
                                                    : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("cannot open: ", std::strerror(e)));
  }
  if (::fstat(file.fd.get(), &file.st) != 0) {
    return absl::DataLossError(absl::StrCat("fstat failed: ", std::strerror(errno)));
  }
  if (!S_ISREG(file.st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("is ", FileKind(file.st.st_mode), ", not a regular file"));
  }
  if (follow_ == FollowSymlinks::kInside) {
    // Where the kernel says the opened file is. Nothing is resolved again,
    // so a folder swapped for a link at any moment cannot make a file
    // outside the root pass (a realpath and a stat after the open each
    // followed the links anew: a swap between them passed).
    const std::string real = OpenedPath(file.fd.get());
    if (real.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot tell where it resolves (/proc/self/fd: ", std::strerror(errno),
          "); the check of ", option_, "=inside needs /proc"));
    }
    if (!IsUnder(real, real_root_)) {
      return absl::PermissionDeniedError(absl::StrCat("resolves to '", EscapeName(real),
                                                      "', outside the ", root_kind_, " ",
                                                      InsideNote()));
    }
  }
  return file;
}

std::string SymlinkPolicy::InsideNote() const { return absl::StrCat("(", option_, " is inside)"); }

}  // namespace sophon
