#include "sophon/data/dataset.h"

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

// FNV-1a, 64 bit.
uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::OpenImageFolder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("dataset directory '", root, "' does not exist"));
  }
  std::unique_ptr<Dataset> ds(new Dataset());
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
  uint64_t h = 0xcbf29ce484222325ULL;
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
      h = Fnv1a(h, entry.relative_path.data(), entry.relative_path.size());
      h = Fnv1a(h, &entry.raw_size, sizeof(entry.raw_size));
      h = Fnv1a(h, &entry.label, sizeof(entry.label));
      ds->entries_.push_back(std::move(entry));
    }
  }
  if (ds->entries_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset directory '", root,
        "' holds no samples (expected ImageFolder layout: ROOT/CLASS/*.jpg)"));
  }
  ds->fingerprint_ = h;
  return ds;
}

std::string Dataset::name() const {
  fs::path p = fs::path(root_).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

absl::StatusOr<std::string> Dataset::Read(uint64_t id) const {
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

}  // namespace sophon
