#include "sophon/data/pack_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/escape.h"
#include "src/data/pread_exact.h"

namespace sophon {
namespace {

constexpr char kMagic[8] = {'S', 'O', 'P', 'H', 'O', 'N', 'P', 'K'};
// The fixed part of a sample's record: shard, offset, size, label, crc32 and
// the path's length.
constexpr size_t kSampleRecordBytes = 4 + 8 + 8 + 4 + 4 + 4;
constexpr uint32_t kMaxNameBytes = 4096;

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutString(absl::string_view s, std::string* out) {
  PutU32(static_cast<uint32_t>(s.size()), out);
  out->append(s.data(), s.size());
}

// Reads the index's fields in order; the first failure sticks.
class Reader {
 public:
  Reader(absl::string_view bytes, absl::string_view file) : rest_(bytes), file_(file) {}

  bool U32(uint32_t* v) {
    uint64_t x;
    if (!Fixed(4, &x)) return false;
    *v = static_cast<uint32_t>(x);
    return true;
  }
  bool U64(uint64_t* v) { return Fixed(8, v); }
  bool String(absl::string_view what, std::string* s) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (n > kMaxNameBytes) return Invalid(absl::StrCat(what, " of ", n, " bytes (at most ",
                                                       kMaxNameBytes, ")"));
    if (n > rest_.size()) return Truncated();
    s->assign(rest_.data(), n);
    rest_.remove_prefix(n);
    return true;
  }
  // Fails unless `count` records of at least `min_bytes` each fit in what is
  // left (so a hostile count allocates nothing).
  bool Fits(uint64_t count, uint64_t min_bytes, absl::string_view what) {
    if (count > rest_.size() / min_bytes) {
      return Invalid(absl::StrCat(count, " ", what, " do not fit the ", rest_.size(),
                                  " bytes left"));
    }
    return true;
  }
  bool Invalid(absl::string_view why) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat("pack index ", file_, ": ", why));
    }
    return false;
  }
  size_t left() const { return rest_.size(); }
  const absl::Status& status() const { return status_; }

 private:
  bool Fixed(int n, uint64_t* v) {
    if (rest_.size() < static_cast<size_t>(n)) return Truncated();
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= uint64_t{static_cast<unsigned char>(rest_[i])} << (8 * i);
    rest_.remove_prefix(n);
    *v = x;
    return true;
  }
  bool Truncated() {
    if (status_.ok()) {
      status_ = absl::DataLossError(absl::StrCat("pack index ", file_, " is truncated"));
    }
    return false;
  }

  absl::string_view rest_;
  absl::string_view file_;
  absl::Status status_;
};

bool SafeShardName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.front() != '.' &&
         name.find('/') == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos;
}

}  // namespace

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed it in slices.
  constexpr size_t kSlice = size_t{1} << 30;
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kSlice);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

std::string EncodePackIndex(const PackIndex& index) {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(kPackIndexVersion, &out);
  PutU64(index.source_fingerprint, &out);
  PutU32(index.group_size, &out);
  PutU32(static_cast<uint32_t>(index.shards.size()), &out);
  PutU32(static_cast<uint32_t>(index.class_names.size()), &out);
  PutU64(index.samples.size(), &out);
  for (const std::string& s : index.shards) PutString(s, &out);
  for (const std::string& c : index.class_names) PutString(c, &out);
  for (const PackedSample& s : index.samples) {
    PutU32(s.shard, &out);
    PutU64(s.offset, &out);
    PutU64(s.size, &out);
    PutU32(s.label, &out);
    PutU32(s.crc32, &out);
    PutString(s.path, &out);
  }
  PutU32(Crc32(out), &out);
  return out;
}

absl::StatusOr<PackIndex> DecodePackIndex(absl::string_view bytes, absl::string_view file) {
  if (bytes.size() < sizeof(kMagic) + 4 ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(
        absl::StrCat("pack index ", file, " is not a Sophon pack index (bad magic)"));
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - 4);
  Reader trailer(bytes.substr(bytes.size() - 4), file);
  uint32_t stored_crc = 0;
  trailer.U32(&stored_crc);
  if (Crc32(body) != stored_crc) {
    return absl::DataLossError(absl::StrCat("pack index ", file,
                                            " fails its checksum (corrupt or truncated)"));
  }
  Reader r(body.substr(sizeof(kMagic)), file);
  PackIndex index;
  uint32_t version = 0, num_shards = 0, num_classes = 0;
  uint64_t num_samples = 0;
  if (!r.U32(&version)) return r.status();
  if (version != kPackIndexVersion) {
    return absl::InvalidArgumentError(absl::StrCat("pack index ", file, " has version ", version,
                                                   "; this build reads version ",
                                                   kPackIndexVersion));
  }
  if (!r.U64(&index.source_fingerprint) || !r.U32(&index.group_size) || !r.U32(&num_shards) ||
      !r.U32(&num_classes) || !r.U64(&num_samples)) {
    return r.status();
  }
  if (index.group_size == 0) {
    r.Invalid("group size 0");
    return r.status();
  }
  if (!r.Fits(num_shards, 4, "shard names") || !r.Fits(num_classes, 4, "class names")) {
    return r.status();
  }
  index.shards.resize(num_shards);
  for (std::string& s : index.shards) {
    if (!r.String("a shard name", &s)) return r.status();
    if (!SafeShardName(s)) {
      r.Invalid(absl::StrCat("shard name '", absl::CEscape(s),
                             "' is not a plain file name in the pack folder"));
      return r.status();
    }
  }
  index.class_names.resize(num_classes);
  for (std::string& c : index.class_names) {
    if (!r.String("a class name", &c)) return r.status();
  }
  if (!r.Fits(num_samples, kSampleRecordBytes, "samples")) return r.status();
  index.samples.resize(num_samples);
  for (uint64_t i = 0; i < num_samples; ++i) {
    PackedSample& s = index.samples[i];
    if (!r.U32(&s.shard) || !r.U64(&s.offset) || !r.U64(&s.size) || !r.U32(&s.label) ||
        !r.U32(&s.crc32) || !r.String("a sample path", &s.path)) {
      return r.status();
    }
    const auto bad = [&](absl::string_view why) {
      r.Invalid(absl::StrCat("sample ", i, " ('", absl::CEscape(s.path), "') ", why));
      return r.status();
    };
    if (s.shard >= num_shards) {
      return bad(absl::StrCat("names shard ", s.shard, " of ", num_shards));
    }
    if (s.label >= num_classes) {
      return bad(absl::StrCat("has label ", s.label, " of ", num_classes, " classes"));
    }
    if (s.offset > std::numeric_limits<uint64_t>::max() - s.size) {
      return bad("has an offset and size that overflow");
    }
    if (i > 0) {
      const PackedSample& prev = index.samples[i - 1];
      if (s.shard < prev.shard ||
          (s.shard == prev.shard && s.offset < prev.offset + prev.size)) {
        return bad("is out of order (a shard's samples must be consecutive, by offset, and "
                   "must not overlap)");
      }
    }
  }
  if (r.left() != 0) {
    r.Invalid(absl::StrCat(r.left(), " bytes after the last sample"));
    return r.status();
  }
  return index;
}

absl::Status WritePackIndex(const std::string& dir, const PackIndex& index) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer =
      AtomicFileWriter::Open(absl::StrCat(dir, "/", kPackIndexName));
  if (!writer.ok()) return writer.status();
  const std::string bytes = EncodePackIndex(index);
  if (absl::Status s = (*writer)->Append(bytes.data(), bytes.size()); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::StatusOr<PackIndex> ReadPackIndex(const std::string& dir, int64_t max_bytes) {
  const std::string path = absl::StrCat(dir, "/", kPackIndexName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    return absl::Status(e == ENOENT ? absl::StatusCode::kNotFound
                                    : absl::StatusCode::kPermissionDenied,
                        absl::StrCat("cannot open the pack index ", EscapeName(path), ": ",
                                     std::strerror(e)));
  }
  std::string bytes;
  struct stat st;
  absl::Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(
        absl::StrCat("the pack index ", EscapeName(path), " is not a regular file"));
  } else if (st.st_size > max_bytes) {
    status = absl::ResourceExhaustedError(absl::StrCat("the pack index ", EscapeName(path),
                                                       " has ", st.st_size,
                                                       " bytes, over the limit of ", max_bytes));
  } else {
    const PreadResult r = PreadExact(fd, 0, static_cast<uint64_t>(st.st_size), &bytes);
    bytes.resize(r.bytes);  // a shorter read fails the checksum
  }
  ::close(fd);
  if (!status.ok()) return status;
  return DecodePackIndex(bytes, EscapeName(path));
}

bool IsPackFolder(const std::string& dir) {
  struct stat st;
  return ::stat(absl::StrCat(dir, "/", kPackIndexName).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace sophon
