// Writing a file so that its path holds either what it held before or the
// whole new content, never a part of it (checkpoints: a crash mid-write must
// not leave a file whose weights disagree with its data cursor).
#ifndef SOPHON_BASE_ATOMIC_FILE_H_
#define SOPHON_BASE_ATOMIC_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sophon {

// Writes to a temporary file in the destination's folder, then Commit()
// fsyncs it, renames it over the destination and fsyncs the folder. Until
// Commit() succeeds the destination is untouched; the temporary file is
// removed when the writer is destroyed uncommitted or a step fails.
// Not thread-safe.
class AtomicFileWriter {
 public:
  // Creates "<path>.tmp.XXXXXX" beside `path`. Errors (from errno:
  // PermissionDenied, NotFound, ...) name the temporary path.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Open(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends `size` bytes. After an error every later call fails with it.
  absl::Status Append(const void* data, size_t size);
  // How Commit makes the file durable.
  enum class Sync {
    kDurable,  // fsync of the file before the rename and of its folder after
    // No fsync: readers see the old content or the whole new one, but a crash
    // of the machine may leave a short or empty file (for caches whose entries
    // carry their own checksum).
    kAtomicOnly,
  };
  // fsync (kDurable), close, rename over the destination, fsync of the
  // folder (kDurable). Errors name the file; the destination keeps its old
  // content then.
  absl::Status Commit(Sync sync = Sync::kDurable);

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  // Records the first error, closes and removes the temporary file.
  absl::Status Fail(int error_number, const std::string& what);

  const std::string path_;
  const std::string temp_path_;
  int fd_;              // -1 once closed
  bool committed_ = false;
  absl::Status error_;  // the first error; every later call returns it
};

}  // namespace sophon

#endif  // SOPHON_BASE_ATOMIC_FILE_H_
