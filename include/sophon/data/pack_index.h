// The index of a pack: where each sample of a folder of WebDataset tar shards
// lies (shard, offset, size), its label and checksum, the class names, the
// group size the shards were written with and the fingerprint of the dataset
// they were made from. One binary file, PACKDIR/sophon-pack.idx, ending with a
// CRC-32 of everything before it; decoding treats it as untrusted input.
#ifndef SOPHON_DATA_PACK_INDEX_H_
#define SOPHON_DATA_PACK_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/data/crc32.h"  // Crc32: the checksum of samples and of the index
#include "sophon/data/follow_symlinks.h"

namespace sophon {

// The index's file name inside a pack folder.
inline constexpr char kPackIndexName[] = "sophon-pack.idx";
inline constexpr uint32_t kPackIndexVersion = 1;

struct PackedSample {
  uint32_t shard = 0;   // index into PackIndex.shards
  uint64_t offset = 0;  // of the sample's image data in its shard
  uint64_t size = 0;    // bytes of image data
  uint32_t label = 0;   // index into PackIndex.class_names
  uint32_t crc32 = 0;   // Crc32 of the image data
  // The sample's name: its relative path in the dataset it was packed from
  // ("class/file.jpg"), or "shard/member" for shards indexed as found.
  std::string path;
};

struct PackIndex {
  // Shard file names in the pack folder (plain names, no '/').
  std::vector<std::string> shards;
  std::vector<std::string> class_names;
  // Samples in id order: a shard's samples are consecutive, by offset.
  std::vector<PackedSample> samples;
  // Samples [k * group_size, (k + 1) * group_size) form group k (the last
  // may be shorter): the server reads a group's bytes at once. >= 1.
  uint32_t group_size = 1;
  // SampleSource::fingerprint() of the dataset packed; 0 if unknown.
  uint64_t source_fingerprint = 0;
};

// The index file's bytes.
std::string EncodePackIndex(const PackIndex& index);
// Parses `bytes` read from `file` (named in errors). DataLoss for a bad
// magic, checksum or truncation; InvalidArgument for a field out of range (a
// label past the classes, a shard past the shards, a shard name with '/' or
// "..", samples of a shard out of offset order, a version this code does not
// read). Counts are checked against the bytes left before anything is
// allocated for them.
absl::StatusOr<PackIndex> DecodePackIndex(absl::string_view bytes, absl::string_view file);

// Writes dir/sophon-pack.idx atomically (temporary file, fsync, rename).
absl::Status WritePackIndex(const std::string& dir, const PackIndex& index);

// The largest index ReadPackIndex reads by default
// (PackSourceOptions.max_index_bytes).
inline constexpr int64_t kDefaultMaxPackIndexBytes = int64_t{4} << 30;

// Reads and decodes dir/sophon-pack.idx, bounding what it holds before the
// index is trusted: under `follow_symlinks` kInside, an index that resolves
// outside `dir` is refused (PermissionDenied); one over `max_bytes`
// (ResourceExhausted), or whose size does not fit the counts of shards,
// classes and samples its header declares (DataLoss), is refused before
// more than its header is read; and its checksum is checked by reading it
// in bounded chunks before the whole file is held. NotFound naming the file
// if there is none. Errors name the file and the field of PackSourceOptions
// (follow_symlinks, max_index_bytes) they come from.
absl::StatusOr<PackIndex> ReadPackIndex(const std::string& dir,
                                        FollowSymlinks follow_symlinks = FollowSymlinks::kInside,
                                        int64_t max_bytes = kDefaultMaxPackIndexBytes);

// Whether `dir` holds a pack index.
bool IsPackFolder(const std::string& dir);

}  // namespace sophon

#endif  // SOPHON_DATA_PACK_INDEX_H_
