#include "sophon/data/pack_writer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/escape.h"
#include "sophon/data/pack_source.h"
#include "sophon/data/tar.h"
#include "src/data/pread_exact.h"
#include "src/data/symlink_policy.h"

namespace sophon {
namespace {

constexpr uint64_t kMaxClsBytes = 32;
constexpr char kOption[] = "PackSourceOptions.follow_symlinks";
constexpr char kRootKind[] = "pack folder";
constexpr size_t kMaxReportedErrors = 100;

// splitmix64: the shuffle of the pack order (a pure function of the seed).
uint64_t Mix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<uint64_t> PackOrder(uint64_t n, bool shuffle, uint64_t seed) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; --i) {
    std::swap(order[i - 1], order[Mix(&state) % i]);
  }
  return order;
}

absl::Status Errno(int e, absl::string_view what) {
  return absl::Status(e == ENOENT ? absl::StatusCode::kNotFound
                      : e == EACCES ? absl::StatusCode::kPermissionDenied
                                    : absl::StatusCode::kFailedPrecondition,
                      absl::StrCat(what, ": ", std::strerror(e)));
}

// The names in `dir` (not "." and ".."), sorted.
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Errno(errno, absl::StrCat("cannot list ", EscapeName(dir)));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status PrepareOutFolder(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(errno, absl::StrCat("cannot create the pack folder ", EscapeName(dir)));
  }
  absl::StatusOr<std::vector<std::string>> names = ListFolder(dir);
  if (!names.ok()) return names.status();
  if (!names->empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the pack folder ", EscapeName(dir), " is not empty (it holds ", EscapeName((*names)[0]),
        (names->size() > 1 ? absl::StrCat(" and ", names->size() - 1, " more") : ""),
        "); give a new or empty folder"));
  }
  return absl::OkStatus();
}

absl::Status WriteWhole(const std::string& path, absl::string_view bytes) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Open(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(bytes.data(), bytes.size()); !s.ok()) return s;
  return (*writer)->Commit();
}

// pread of exactly `size` bytes; DataLoss naming `file` otherwise.
absl::Status ReadAt(int fd, uint64_t offset, uint64_t size, absl::string_view file,
                    std::string* out) {
  const PreadResult r = PreadExact(fd, offset, size, out);
  if (!r.complete(size)) {
    return absl::DataLossError(absl::StrCat(
        file, ": cannot read ", size, " bytes at offset ", offset,
        r.error != 0 ? absl::StrCat(": ", std::strerror(r.error)) : std::string(" (truncated)")));
  }
  return absl::OkStatus();
}

// A member name's key and extension: "a/b.c.d" -> ("a/b", "c.d").
std::pair<std::string, std::string> SplitKey(absl::string_view name) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == absl::string_view::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == absl::string_view::npos) return {std::string(name), ""};
  return {std::string(name.substr(0, dot)), absl::AsciiStrToLower(name.substr(dot + 1))};
}

}  // namespace

absl::Status PackWriteOptions::Validate() const {
  if (group_size == 0 && group_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PackWriteOptions.group_size must be >= 1, or group_bytes > 0 with group_size 0 (got ",
        group_size, " and ", group_bytes, ")"));
  }
  if (group_size > 0 && group_bytes > 0) {
    return absl::InvalidArgumentError(
        "PackWriteOptions.group_size and group_bytes are exclusive: set one");
  }
  if (shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackWriteOptions.shard_bytes must be >= 1, got ", shard_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackIndex> WritePack(const SampleSource& source, const std::string& out_dir,
                                    const PackWriteOptions& options,
                                    const PackProgressFn& progress) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const uint64_t n = source.size();
  if (n == 0) return absl::FailedPreconditionError("the dataset to pack holds no samples");
  if (absl::Status s = PrepareOutFolder(out_dir); !s.ok()) return s;
  PackIndex index;
  index.class_names = source.class_names();
  index.source_fingerprint = source.fingerprint();
  uint64_t total_bytes = 0;
  for (uint64_t id = 0; id < n; ++id) total_bytes += source.manifest().raw_size(id);
  index.group_size = options.group_size > 0
                         ? options.group_size
                         : static_cast<uint32_t>(std::clamp<uint64_t>(
                               (static_cast<uint64_t>(options.group_bytes) * n +
                                total_bytes / 2) / std::max<uint64_t>(total_bytes, 1),
                               1, UINT32_MAX));
  const std::vector<uint64_t> order = PackOrder(n, options.shuffle, options.seed);
  index.samples.reserve(n);

  std::unique_ptr<AtomicFileWriter> shard;
  uint64_t shard_offset = 0;
  PackProgress done{0, n, 0};
  const auto close_shard = [&]() -> absl::Status {
    if (shard == nullptr) return absl::OkStatus();
    std::string end;
    AppendTarEnd(&end);
    if (absl::Status s = shard->Append(end.data(), end.size()); !s.ok()) return s;
    absl::Status s = shard->Commit();
    shard.reset();
    return s;
  };
  std::string buffer;
  for (uint64_t start = 0; start < n; start += index.group_size) {
    const uint64_t end = std::min<uint64_t>(start + index.group_size, n);
    if (shard == nullptr || shard_offset >= static_cast<uint64_t>(options.shard_bytes)) {
      if (absl::Status s = close_shard(); !s.ok()) return s;
      index.shards.push_back(absl::StrFormat("shard-%06d.tar", index.shards.size()));
      absl::StatusOr<std::unique_ptr<AtomicFileWriter>> opened =
          AtomicFileWriter::Open(absl::StrCat(out_dir, "/", index.shards.back()));
      if (!opened.ok()) return opened.status();
      shard = *std::move(opened);
      shard_offset = 0;
    }
    buffer.clear();
    for (uint64_t position = start; position < end; ++position) {
      const uint64_t id = order[position];
      absl::StatusOr<std::string> bytes = source.Read(id);
      if (!bytes.ok()) return bytes.status();
      const std::string key = absl::StrFormat("%09d", position);
      PackedSample sample;
      sample.shard = static_cast<uint32_t>(index.shards.size() - 1);
      sample.offset = shard_offset + buffer.size() + kTarBlock;
      sample.size = bytes->size();
      sample.label = source.manifest().label(id);
      sample.crc32 = Crc32(*bytes);
      sample.path = std::string(source.manifest().relative_path(id));
      if (absl::Status s = AppendTarMember(absl::StrCat(key, ".jpg"), *bytes, &buffer); !s.ok()) {
        return s;
      }
      if (absl::Status s = AppendTarMember(absl::StrCat(key, ".cls"),
                                           absl::StrCat(sample.label), &buffer);
          !s.ok()) {
        return s;
      }
      done.bytes_done += sample.size;
      index.samples.push_back(std::move(sample));
    }
    if (absl::Status s = shard->Append(buffer.data(), buffer.size()); !s.ok()) return s;
    shard_offset += buffer.size();
    done.samples_done = end;
    if (progress) progress(done);
  }
  if (absl::Status s = close_shard(); !s.ok()) return s;
  std::string classes;
  for (const std::string& c : index.class_names) absl::StrAppend(&classes, c, "\n");
  if (absl::Status s = WriteWhole(absl::StrCat(out_dir, "/classes.txt"), classes); !s.ok()) {
    return s;
  }
  if (absl::Status s = WritePackIndex(out_dir, index); !s.ok()) return s;
  return index;
}

absl::StatusOr<PackIndex> IndexShards(const std::string& dir, uint32_t group_size,
                                      const PackProgressFn& progress,
                                      FollowSymlinks follow_symlinks) {
  if (group_size == 0) {
    return absl::InvalidArgumentError("the group size of an index must be >= 1, got 0");
  }
  // The policy PackSource::Open applies: what the server would refuse to
  // read is not indexed.
  absl::StatusOr<std::string> real_dir = SymlinkPolicy::ResolveRoot(dir, kRootKind);
  if (!real_dir.ok()) return real_dir.status();
  const SymlinkPolicy policy(follow_symlinks, *real_dir, kOption, kRootKind);
  absl::StatusOr<std::vector<std::string>> names = ListFolder(dir);
  if (!names.ok()) return names.status();
  PackIndex index;
  index.group_size = group_size;
  for (const std::string& name : *names) {
    if (absl::EndsWith(name, ".tar") && name.front() != '.') index.shards.push_back(name);
  }
  if (index.shards.empty()) {
    return absl::NotFoundError(absl::StrCat("no *.tar shards in ", EscapeName(dir)));
  }
  uint32_t max_label = 0;
  PackProgress done;
  for (uint32_t k = 0; k < index.shards.size(); ++k) {
    const std::string path = absl::StrCat(dir, "/", index.shards[k]);
    const std::string shown = EscapeName(path);
    absl::StatusOr<OpenedFile> file = policy.Open(path);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat(shown, ": ", file.status().message()));
    }
    const int fd = file->fd.get();
    const uint64_t file_size = static_cast<uint64_t>(file->st.st_size);
    // The sample being assembled from consecutive members of one key.
    std::optional<PackedSample> image;
    std::optional<uint32_t> label;
    std::string key;
    const auto finish = [&]() -> absl::Status {
      if (!image && !label) return absl::OkStatus();
      if (!image || !label) {
        return absl::InvalidArgumentError(absl::StrCat(shown, ": sample '", EscapeName(key),
                                                       "' has no ", image ? ".cls" : ".jpg",
                                                       " member"));
      }
      image->label = *label;
      max_label = std::max(max_label, *label);
      done.bytes_done += image->size;
      index.samples.push_back(*std::move(image));
      image.reset();
      label.reset();
      return absl::OkStatus();
    };
    std::optional<TarMember> pax_next;
    std::string block, data;
    for (uint64_t offset = 0;;) {
      if (absl::Status s = ReadAt(fd, offset, kTarBlock, shown, &block); !s.ok()) return s;
      absl::StatusOr<std::optional<TarMember>> member =
          ParseTarHeader(block, offset, file_size, shown, /*allow_pax=*/true);
      if (!member.ok()) return member.status();
      if (!member->has_value()) break;
      TarMember m = **member;
      if (m.pax) {
        if (m.size > kMaxClsBytes * 1024) {
          return absl::InvalidArgumentError(absl::StrCat(shown, ": the pax header at offset ",
                                                         offset, " holds ", m.size, " bytes"));
        }
        if (absl::Status s = ReadAt(fd, m.data_offset, m.size, shown, &data); !s.ok()) return s;
        TarMember next;
        if (absl::Status s = ApplyPaxRecords(data, &next); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(shown, ": the pax header at offset ",
                                                         offset, ": ", s.message()));
        }
        pax_next = std::move(next);
        offset = m.next_offset();
        continue;
      }
      if (pax_next) {
        if (!pax_next->name.empty()) m.name = pax_next->name;
        if (pax_next->size != 0) m.size = pax_next->size;
        pax_next.reset();
        if (m.size > file_size - m.data_offset) {
          return absl::InvalidArgumentError(absl::StrCat(
              shown, ": member '", EscapeName(m.name), "' at offset ", offset, " has ", m.size,
              " bytes, past the end of the file"));
        }
      }
      auto [member_key, ext] = SplitKey(m.name);
      if (member_key != key) {
        if (absl::Status s = finish(); !s.ok()) return s;
        key = member_key;
      }
      if (ext == "jpg" || ext == "jpeg") {
        if (image) {
          return absl::InvalidArgumentError(absl::StrCat(shown, ": sample '", EscapeName(key),
                                                         "' has two images"));
        }
        if (absl::Status s = ReadAt(fd, m.data_offset, m.size, shown, &data); !s.ok()) return s;
        PackedSample sample;
        sample.shard = k;
        sample.offset = m.data_offset;
        sample.size = m.size;
        sample.crc32 = Crc32(data);
        sample.path = absl::StrCat(index.shards[k], "/", m.name);
        image = std::move(sample);
      } else if (ext == "cls") {
        if (m.size > kMaxClsBytes) {
          return absl::InvalidArgumentError(absl::StrCat(shown, ": '", EscapeName(m.name),
                                                         "' holds ", m.size,
                                                         " bytes, not a class number"));
        }
        if (absl::Status s = ReadAt(fd, m.data_offset, m.size, shown, &data); !s.ok()) return s;
        uint32_t value = 0;
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(data), &value) ||
            value >= (uint32_t{1} << 24)) {
          return absl::InvalidArgumentError(absl::StrCat(shown, ": '", EscapeName(m.name),
                                                         "' does not hold a class number"));
        }
        label = value;
      }
      offset = m.next_offset();
      if (offset >= file_size) break;
    }
    if (absl::Status s = finish(); !s.ok()) return s;
    done.samples_done = done.samples_total = index.samples.size();
    if (progress) progress(done);
  }
  if (index.samples.empty()) {
    return absl::NotFoundError(absl::StrCat("no samples (KEY.jpg with KEY.cls) in the shards of ",
                                            EscapeName(dir)));
  }
  const std::string classes_path = absl::StrCat(dir, "/classes.txt");
  std::string classes;
  if (::access(classes_path.c_str(), F_OK) == 0) {
    std::string bytes;
    absl::StatusOr<OpenedFile> file = policy.Open(classes_path);
    if (!file.ok()) {
      return absl::Status(file.status().code(), absl::StrCat(EscapeName(classes_path), ": ",
                                                             file.status().message()));
    }
    if (file->st.st_size > (64 << 20)) {
      return absl::FailedPreconditionError(
          absl::StrCat(EscapeName(classes_path), " is not a readable file of at most 64 MiB"));
    }
    if (absl::Status s = ReadAt(file->fd.get(), 0, static_cast<uint64_t>(file->st.st_size),
                                EscapeName(classes_path), &bytes);
        !s.ok()) {
      return s;
    }
    for (absl::string_view line : absl::StrSplit(bytes, '\n', absl::SkipEmpty())) {
      index.class_names.emplace_back(line);
    }
    if (index.class_names.size() <= max_label) {
      return absl::InvalidArgumentError(absl::StrCat(
          EscapeName(classes_path), " names ", index.class_names.size(),
          " classes, but a .cls member holds label ", max_label));
    }
  } else {
    for (uint32_t c = 0; c <= max_label; ++c) index.class_names.push_back(absl::StrCat(c));
  }
  if (absl::Status s = WritePackIndex(dir, index); !s.ok()) return s;
  return index;
}

absl::StatusOr<PackVerifyReport> VerifyPack(const std::string& dir, const PackProgressFn& progress,
                                            FollowSymlinks follow_symlinks) {
  PackSourceOptions options;
  options.max_sample_bytes = int64_t{1} << 30;
  options.follow_symlinks = follow_symlinks;
  absl::StatusOr<std::unique_ptr<PackSource>> source = PackSource::Open(dir, options);
  if (!source.ok()) return source.status();
  absl::StatusOr<std::string> real_dir = SymlinkPolicy::ResolveRoot(dir, kRootKind);
  if (!real_dir.ok()) return real_dir.status();
  const SymlinkPolicy policy(follow_symlinks, *real_dir, kOption, kRootKind);
  // The tar headers are read through descriptors of their own, checked as
  // PackSource::Open checks its shards (-1: reported per sample).
  const std::vector<std::string> shards = (*source)->FilePaths();
  std::vector<ScopedFd> fds;
  for (const std::string& shard : shards) {
    absl::StatusOr<OpenedFile> file = policy.Open(shard);
    fds.push_back(file.ok() ? std::move(file->fd) : ScopedFd());
  }
  absl::StatusOr<PackIndex> index = ReadPackIndex(dir, follow_symlinks);
  if (!index.ok()) return index.status();
  PackVerifyReport report;
  report.samples = (*source)->size();
  PackProgress done{0, report.samples, 0};
  const auto fail = [&](std::string error) {
    ++report.bad;
    if (report.errors.size() < kMaxReportedErrors) report.errors.push_back(std::move(error));
  };
  std::string block;
  for (uint64_t id = 0; id < report.samples; ++id) {
    const PackedSample& s = index->samples[id];
    done.samples_done = id + 1;
    done.bytes_done += s.size;
    if (progress && (id % 256 == 255 || id + 1 == report.samples)) progress(done);
    absl::StatusOr<std::string> bytes = (*source)->Read(id);
    if (!bytes.ok()) {
      fail(std::string(bytes.status().message()));
      continue;
    }
    if (s.offset < kTarBlock || fds[s.shard].get() < 0 ||
        !ReadAt(fds[s.shard].get(), s.offset - kTarBlock, kTarBlock, shards[s.shard], &block)
             .ok()) {
      fail(absl::StrCat("sample ", id, " ('", EscapeName(s.path), "'): no tar header before it"));
      continue;
    }
    absl::StatusOr<std::optional<TarMember>> member = ParseTarHeader(
        block, s.offset - kTarBlock, UINT64_MAX, EscapeName(shards[s.shard]));
    if (!member.ok() || !member->has_value() || (*member)->size != s.size) {
      fail(absl::StrCat("sample ", id, " ('", EscapeName(s.path), "'): ",
                        member.ok() ? "its tar header does not describe it"
                                    : member.status().message()));
    }
  }
  return report;
}

}  // namespace sophon
