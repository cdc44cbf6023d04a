#include "sophon/data/image_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sophon/base/escape.h"
#include "src/data/symlink_policy.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxFileBytesLimit = int64_t{1} << 30;
// Links refused at manifest time that are logged one by one; the rest are counted.
constexpr int kLoggedSkips = 10;

bool IsJpegName(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  const std::string lower = absl::AsciiStrToLower(name);
  auto ends_with = [&](const std::string& suffix) {
    return lower.size() > suffix.size() &&
           lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".jpg") || ends_with(".jpeg");
}

bool IsSymlink(const fs::path& path) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(path, ec));
}

constexpr char kOption[] = "ImageFolderOptions.follow_symlinks";
constexpr char kRootKind[] = "dataset root";

}  // namespace

absl::Status ImageFolderOptions::Validate() const {
  if (max_file_bytes < 1 || max_file_bytes > kMaxFileBytesLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImageFolderOptions.max_file_bytes must be in [1, ", kMaxFileBytesLimit,
                     "] (a sample travels in one message), got ", max_file_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ImageFolderSource>> ImageFolderSource::Open(
    const std::string& root, const ImageFolderOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(
        absl::StrCat("dataset directory '", EscapeName(root), "' does not exist"));
  }
  std::unique_ptr<ImageFolderSource> ds(new ImageFolderSource());
  ds->root_ = root;
  ds->options_ = options;
  absl::StatusOr<std::string> real_root = SymlinkPolicy::ResolveRoot(root, kRootKind);
  if (!real_root.ok()) return real_root.status();
  ds->real_root_ = *std::move(real_root);
  const SymlinkPolicy policy = ds->policy();
  const bool inside_only = options.follow_symlinks == FollowSymlinks::kInside;
  int skipped_links = 0;
  // Under kInside, whether the entry at `path` resolves inside the root when
  // it is `linked` (a link, or in a linked class directory); logs the first
  // refusals.
  auto allowed = [&](const fs::path& path, bool linked, absl::string_view relative) {
    std::string real;
    if (policy.Allowed(path.string(), linked, &real)) return true;
    if (real.empty()) return false;  // a dangling link: nothing to serve
    if (skipped_links++ < kLoggedSkips) {
      spdlog::warn("dataset {}: skipping '{}': a link to '{}', outside the dataset root {}",
                   EscapeName(root), EscapeName(relative), EscapeName(real),
                   policy.InsideNote());
    }
    return false;
  };

  std::vector<std::string> class_dirs;  // as on disk
  fs::directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.empty() || name[0] == '.' || !it->is_directory(type_ec)) continue;
    std::error_code link_ec;  // the entry's own type comes from the listing
    if (allowed(it->path(), it->is_symlink(link_ec), name)) {
      class_dirs.push_back(name);
    }
  }
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot list dataset directory '", EscapeName(root), "': ", ec.message()));
  }
  std::sort(class_dirs.begin(), class_dirs.end());
  // A first pass counts the candidates (names only: no stat), so that the
  // table is made at its size instead of growing by doubling.
  size_t candidates = 0, candidate_bytes = 0;
  for (const std::string& cls : class_dirs) {
    std::error_code count_ec;
    for (fs::directory_iterator f(fs::path(root) / cls, count_ec); !count_ec && f != end;
         f.increment(count_ec)) {
      const std::string name = f->path().filename().string();
      if (!IsJpegName(name)) continue;
      ++candidates;
      candidate_bytes += cls.size() + 1 + name.size();
    }
  }
  ds->manifest_.Reserve(candidates, candidate_bytes);
  // One class at a time, straight into the compact table: nothing per sample
  // but the table is held for the whole dataset.
  ManifestHasher hasher;  // over the names as on disk
  for (uint32_t label = 0; label < class_dirs.size(); ++label) {
    const std::string& cls = class_dirs[label];
    const fs::path dir = fs::path(root) / cls;
    const bool linked_dir = inside_only && IsSymlink(dir);
    struct File {
      std::string name;
      uint64_t size;
      uint32_t version;
      bool operator<(const File& o) const { return name < o.name; }
    };
    std::vector<File> files;
    for (fs::directory_iterator f(dir, ec); !ec && f != end; f.increment(ec)) {
      const std::string name = f->path().filename().string();
      if (!IsJpegName(name)) continue;
      // One stat (following links) for the type and the size.
      struct stat st;
      if (::stat(f->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      std::error_code link_ec;  // the entry's own type comes from the listing
      if (!allowed(f->path(), linked_dir || f->is_symlink(link_ec), cls + "/" + name)) continue;
      files.push_back(File{name, static_cast<uint64_t>(st.st_size),
                           SampleVersion(st.st_mtim.tv_sec, st.st_mtim.tv_nsec)});
    }
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("cannot list class directory '",
                                                        EscapeName(cls), "' in '",
                                                        EscapeName(root), "': ", ec.message()));
    }
    std::sort(files.begin(), files.end());
    for (const auto& [name, size, version] : files) {
      const std::string on_disk = absl::StrCat(cls, "/", name);
      hasher.Add(on_disk, size, label);
      std::string escaped = EscapeName(on_disk);
      if (escaped != on_disk) ds->disk_paths_.emplace(ds->manifest_.size(), on_disk);
      ds->manifest_.Add(escaped, label, size, version);
    }
  }
  ds->manifest_.ShrinkToFit();
  if (skipped_links > kLoggedSkips) {
    spdlog::warn("dataset {}: skipped {} links to outside the dataset root in all",
                 EscapeName(root), skipped_links);
  }
  if (ds->manifest_.size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset directory '", EscapeName(root),
        "' holds no samples (expected ImageFolder layout: ROOT/CLASS/*.jpg)",
        skipped_links == 0
            ? ""
            : absl::StrCat("; ", skipped_links,
                           " links to outside the root were skipped "
                           "(ImageFolderOptions.follow_symlinks is inside)")));
  }
  // The fingerprint hashes the names as on disk: escaping them for the
  // manifest changes no dataset's fingerprint.
  ds->fingerprint_ = hasher.value();
  ds->class_names_.reserve(class_dirs.size());
  for (const std::string& cls : class_dirs) ds->class_names_.push_back(EscapeName(cls));
  return ds;
}

SymlinkPolicy ImageFolderSource::policy() const {
  return SymlinkPolicy(options_.follow_symlinks, real_root_, kOption, kRootKind);
}

absl::string_view ImageFolderSource::DiskPath(uint64_t id) const {
  if (!disk_paths_.empty()) {
    auto it = disk_paths_.find(id);
    if (it != disk_paths_.end()) return it->second;
  }
  return manifest_.relative_path(id);
}

std::string ImageFolderSource::name() const {
  fs::path p = fs::path(root_).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return EscapeName(p.filename().string());  // goes into the manifest
}

absl::StatusOr<std::string> ImageFolderSource::Read(uint64_t id) const {
  if (id >= manifest_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", id, " is outside the manifest of ", manifest_.size(), " samples"));
  }
  auto error = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat("sample ", id, " (", manifest_.relative_path(id),
                                           "): ", what));
  };
  const std::string path = (fs::path(root_) / std::string(DiskPath(id))).string();
  absl::StatusOr<OpenedFile> file = policy().Open(path);
  if (!file.ok()) return error(file.status().code(), file.status().message());
  const int fd = file->fd.get();
  const struct stat& st = file->st;
  const int64_t cap = options_.max_file_bytes;
  if (st.st_size > cap) {
    return error(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("file has ", st.st_size,
                              " bytes, more than ImageFolderOptions.max_file_bytes (", cap, ")"));
  }
  // Reads up to cap + 1 bytes, so a file that grew past the cap is caught
  // without reading the rest (procfs files report size 0).
  const size_t limit = static_cast<size_t>(cap) + 1;
  std::string bytes(std::min<size_t>(static_cast<size_t>(st.st_size) + 1, limit), '\0');
  size_t got = 0;
  while (true) {
    if (got == bytes.size()) {
      if (got >= limit) break;
      bytes.resize(std::min(limit, std::max<size_t>(2 * got, 64 << 10)));
    }
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return error(absl::StatusCode::kDataLoss,
                   absl::StrCat("read failed: ", std::strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > static_cast<size_t>(cap)) {
    return error(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("file grew past ImageFolderOptions.max_file_bytes (", cap,
                              ") while it was read"));
  }
  bytes.resize(got);
  return bytes;
}

std::vector<std::string> ImageFolderSource::FilePaths() const {
  std::vector<std::string> paths;
  paths.reserve(manifest_.size());
  const fs::path root(root_);
  for (uint64_t id = 0; id < manifest_.size(); ++id) {
    paths.push_back((root / std::string(DiskPath(id))).string());
  }
  return paths;
}

}  // namespace sophon
