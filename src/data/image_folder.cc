#include "sophon/data/image_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

bool IsJpegName(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  const std::string lower = absl::AsciiStrToLower(name);
  auto ends_with = [&](const std::string& suffix) {
    return lower.size() > suffix.size() &&
           lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".jpg") || ends_with(".jpeg");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageFolderSource>> ImageFolderSource::Open(
    const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("dataset directory '", root, "' does not exist"));
  }
  std::unique_ptr<ImageFolderSource> ds(new ImageFolderSource());
  ds->root_ = root;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_directory()) ds->class_names_.push_back(name);
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot list dataset directory '", root, "': ", ec.message()));
  }
  std::sort(ds->class_names_.begin(), ds->class_names_.end());
  for (uint32_t label = 0; label < ds->class_names_.size(); ++label) {
    const std::string& cls = ds->class_names_[label];
    std::vector<std::pair<std::string, uint64_t>> files;
    for (const fs::directory_entry& e : fs::directory_iterator(fs::path(root) / cls, ec)) {
      const std::string name = e.path().filename().string();
      if (IsJpegName(name) && e.is_regular_file()) files.emplace_back(name, e.file_size());
    }
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot list class directory '", cls, "' in '", root, "': ", ec.message()));
    }
    std::sort(files.begin(), files.end());
    for (auto& [name, size] : files) {
      ManifestEntry entry;
      entry.relative_path = absl::StrCat(cls, "/", name);
      entry.label = label;
      entry.raw_size = size;
      ds->entries_.push_back(std::move(entry));
    }
  }
  if (ds->entries_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset directory '", root,
        "' holds no samples (expected ImageFolder layout: ROOT/CLASS/*.jpg)"));
  }
  ds->fingerprint_ = ManifestFingerprint(ds->entries_);
  return ds;
}

std::string ImageFolderSource::name() const {
  fs::path p = fs::path(root_).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

absl::StatusOr<std::string> ImageFolderSource::Read(uint64_t id) const {
  if (id >= entries_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", id, " is outside the manifest of ", entries_.size(), " samples"));
  }
  const std::string path = (fs::path(root_) / entries_[id].relative_path).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("sample ", id, " (", entries_[id].relative_path, "): cannot open: ",
                     std::strerror(errno)));
  }
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("sample ", id, " (", entries_[id].relative_path,
                                              "): read failed: ", std::strerror(saved)));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

std::vector<std::string> ImageFolderSource::FilePaths() const {
  std::vector<std::string> paths;
  paths.reserve(entries_.size());
  const fs::path root(root_);
  for (const ManifestEntry& e : entries_) paths.push_back((root / e.relative_path).string());
  return paths;
}

}  // namespace sophon
