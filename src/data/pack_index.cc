#include "sophon/data/pack_index.h"

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
#include "src/data/symlink_policy.h"

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

// A record of the header: magic, version, fingerprint, group size, shard,
// class and sample counts; the trailer: the CRC-32.
constexpr uint64_t kHeaderBytes = sizeof(kMagic) + 4 + 8 + 4 + 4 + 4 + 8;
constexpr uint64_t kTrailerBytes = 4;
// What the streaming checksum reads at a time.
constexpr uint64_t kCrcChunkBytes = uint64_t{1} << 20;

uint64_t LittleEndian(absl::string_view bytes, size_t at, int n) {
  uint64_t x = 0;
  for (int i = 0; i < n; ++i) x |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return x;
}

// Checks the magic and version of `header` (kHeaderBytes) and that a file of
// `size` bytes can hold what the header's counts declare: at least the
// fixed part of every record, at most their largest names.
absl::Status CheckSize(absl::string_view header, uint64_t size, absl::string_view file) {
  if (std::memcmp(header.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(
        absl::StrCat("pack index ", file, " is not a Sophon pack index (bad magic)"));
  }
  const uint32_t version = static_cast<uint32_t>(LittleEndian(header, 8, 4));
  if (version != kPackIndexVersion) {
    return absl::InvalidArgumentError(absl::StrCat("pack index ", file, " has version ", version,
                                                   "; this build reads version ",
                                                   kPackIndexVersion));
  }
  const uint64_t shards = LittleEndian(header, 24, 4);
  const uint64_t classes = LittleEndian(header, 28, 4);
  const uint64_t samples = LittleEndian(header, 32, 8);
  using Wide = unsigned __int128;  // 4132 x 2^64 does not overflow it
  const Wide fixed = Wide{kHeaderBytes} + kTrailerBytes;
  const Wide names = Wide{shards} + classes;
  const Wide least = fixed + names * 4 + Wide{samples} * kSampleRecordBytes;
  const Wide most =
      fixed + names * (4 + kMaxNameBytes) + Wide{samples} * (kSampleRecordBytes + kMaxNameBytes);
  const std::string counts =
      absl::StrCat(shards, " shards, ", classes, " classes and ", samples, " samples");
  if (Wide{size} < least) {
    return absl::DataLossError(absl::StrCat("pack index ", file, " is truncated: its header "
                                            "declares ",
                                            counts, ", which take at least ",
                                            static_cast<uint64_t>(least), " bytes; it has ", size));
  }
  if (Wide{size} > most) {
    return absl::DataLossError(absl::StrCat("pack index ", file, " has ", size,
                                            " bytes, more than the ", static_cast<uint64_t>(most),
                                            " its header's ", counts, " can take (corrupt)"));
  }
  return absl::OkStatus();
}

// Checks the CRC-32 of the `size` bytes of the index open as `fd`, reading
// kCrcChunkBytes at a time.
absl::Status CheckCrcInChunks(int fd, uint64_t size, absl::string_view file) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::string chunk;
  const uint64_t body = size - kTrailerBytes;
  for (uint64_t at = 0; at < body; at += kCrcChunkBytes) {
    const uint64_t n = std::min(kCrcChunkBytes, body - at);
    const PreadResult r = PreadExact(fd, at, n, &chunk);
    if (!r.complete(n)) {
      return absl::DataLossError(absl::StrCat(
          "pack index ", file, " cannot be read at offset ", at + r.bytes,
          r.error != 0 ? absl::StrCat(": ", std::strerror(r.error)) : std::string(" (truncated)")));
    }
    crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(n));
  }
  const PreadResult r = PreadExact(fd, body, kTrailerBytes, &chunk);
  if (!r.complete(kTrailerBytes) ||
      static_cast<uint32_t>(crc) != static_cast<uint32_t>(LittleEndian(chunk, 0, 4))) {
    return absl::DataLossError(absl::StrCat("pack index ", file,
                                            " fails its checksum (corrupt or truncated)"));
  }
  return absl::OkStatus();
}

bool SafeShardName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.front() != '.' &&
         name.find('/') == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos;
}

}  // namespace

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

absl::StatusOr<PackIndex> ReadPackIndex(const std::string& dir, FollowSymlinks follow_symlinks,
                                        int64_t max_bytes) {
  const std::string path = absl::StrCat(dir, "/", kPackIndexName);
  const std::string shown = EscapeName(path);
  absl::StatusOr<std::string> real_root = SymlinkPolicy::ResolveRoot(dir, "pack folder");
  if (!real_root.ok()) return real_root.status();
  const SymlinkPolicy policy(follow_symlinks, *real_root, "PackSourceOptions.follow_symlinks",
                             "pack folder");
  absl::StatusOr<OpenedFile> file = policy.Open(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat("the pack index ", shown, ": ",
                                                           file.status().message()));
  }
  const int fd = file->fd.get();
  const uint64_t size = static_cast<uint64_t>(file->st.st_size);
  if (file->st.st_size > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the pack index ", shown, " has ", size,
                     " bytes, over PackSourceOptions.max_index_bytes (", max_bytes, ")"));
  }
  std::string bytes;
  if (size >= kHeaderBytes + kTrailerBytes) {
    // Nothing past the header is read before the file's size fits the
    // header's counts, and nothing is held whole before its checksum passes.
    const PreadResult r = PreadExact(fd, 0, kHeaderBytes, &bytes);
    if (!r.complete(kHeaderBytes)) {
      return absl::DataLossError(absl::StrCat("pack index ", shown, " cannot be read",
                                              r.error != 0 ? ": " : " (truncated)",
                                              r.error != 0 ? std::strerror(r.error) : ""));
    }
    if (absl::Status s = CheckSize(bytes, size, shown); !s.ok()) return s;
    if (absl::Status s = CheckCrcInChunks(fd, size, shown); !s.ok()) return s;
  }
  const PreadResult r = PreadExact(fd, 0, size, &bytes);
  bytes.resize(r.bytes);  // a shorter read fails the checksum
  return DecodePackIndex(bytes, shown);
}

bool IsPackFolder(const std::string& dir) {
  struct stat st;
  return ::stat(absl::StrCat(dir, "/", kPackIndexName).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace sophon
