// The FollowSymlinks policy (sophon/data/follow_symlinks.h) as every source
// applies it to the files under its root: which links a listing keeps, and
// the checks on a file once it is opened. Image folders (their classes and
// samples) and packs (their index and shards) share it.
#ifndef SOPHON_SRC_DATA_SYMLINK_POLICY_H_
#define SOPHON_SRC_DATA_SYMLINK_POLICY_H_

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/data/follow_symlinks.h"

namespace sophon {

// The path with every link resolved (realpath), or empty if it cannot be
// resolved (errno tells why).
std::string RealPath(const std::string& path);

// Where the open file `fd` is, as the kernel names it (/proc/self/fd): the
// path with every link resolved, at no later moment than the open. Empty if
// it cannot be read (errno tells why).
std::string OpenedPath(int fd);

// Whether the resolved path `real` lies strictly under the resolved root.
bool IsUnder(absl::string_view real, absl::string_view real_root);

// A file descriptor, closed when this goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  // Gives up ownership: the caller closes it.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// A file opened by SymlinkPolicy::Open: its descriptor and its fstat.
struct OpenedFile {
  ScopedFd fd;
  struct stat st = {};
};

// A resolved root and the policy for the links under it. Holds views: the
// caller keeps the strings alive. Immutable; thread-safe.
class SymlinkPolicy {
 public:
  // `real_root` from ResolveRoot; `option` names the policy's field in errors
  // and warnings ("ImageFolderOptions.follow_symlinks"); `root_kind` names
  // the root in them ("dataset root", "pack folder").
  SymlinkPolicy(FollowSymlinks follow, absl::string_view real_root, absl::string_view option,
                absl::string_view root_kind)
      : follow_(follow), real_root_(real_root), option_(option), root_kind_(root_kind) {}

  // `root` with every link resolved. NotFound if it does not exist, else
  // FailedPrecondition; both name `root_kind` and the root.
  static absl::StatusOr<std::string> ResolveRoot(const std::string& root,
                                                 absl::string_view root_kind);

  FollowSymlinks follow() const { return follow_; }

  // Whether a listing keeps the entry at `path`, reached through a link when
  // `linked` (a link itself, or inside a linked directory): always under
  // kAll or when not linked; under kInside only if it resolves strictly
  // under the root (a dangling link never). Sets *real to where it resolves
  // when it checked (empty if it cannot be resolved).
  bool Allowed(const std::string& path, bool linked, std::string* real) const;

  // Opens `path` read-only without blocking (opening a FIFO waits for no
  // writer) and checks what was opened: a regular file, and under kInside
  // that the file opened lies under the root (OpenedPath: no link followed
  // again, so a link swapped in after a listing, or while the check runs,
  // is refused). The messages
  // leave the path out (the caller names the file): NotFound if it is gone,
  // FailedPrecondition if it cannot be opened or is not a regular file,
  // PermissionDenied "resolves to 'X', outside the <root_kind> (<option> is
  // inside)", DataLoss if fstat fails.
  absl::StatusOr<OpenedFile> Open(const std::string& path) const;

  // "(<option> is inside)", for the messages of callers.
  std::string InsideNote() const;

 private:
  FollowSymlinks follow_;
  absl::string_view real_root_;
  absl::string_view option_;
  absl::string_view root_kind_;
};

}  // namespace sophon

#endif  // SOPHON_SRC_DATA_SYMLINK_POLICY_H_
