// Making, indexing and checking packs (pack_index.h, pack_source.h): a
// dataset written as WebDataset tar shards (KEY.jpg and KEY.cls per sample)
// in groups the server reads at once, existing WebDataset shards indexed as
// they are, and every checksum of a pack verified.
#ifndef SOPHON_DATA_PACK_WRITER_H_
#define SOPHON_DATA_PACK_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/data/follow_symlinks.h"
#include "sophon/data/pack_index.h"
#include "sophon/data/sample_source.h"

namespace sophon {

struct PackWriteOptions {
  // Samples per group; 0 = derived from group_bytes.
  uint32_t group_size = 32;
  // With group_size 0: groups of about this many bytes (the group size is
  // group_bytes over the mean sample size, at least 1).
  int64_t group_bytes = 0;
  // A shard is closed at the first group boundary at or past this many bytes.
  int64_t shard_bytes = int64_t{1} << 30;
  // Shuffle the samples (with `seed`) before grouping them, so that a group
  // mixes classes; off keeps the source's order.
  bool shuffle = true;
  uint64_t seed = 0;

  absl::Status Validate() const;
};

// Where a long job stands, for a progress line.
struct PackProgress {
  uint64_t samples_done = 0;
  uint64_t samples_total = 0;
  uint64_t bytes_done = 0;  // sample bytes read (or written)
};
using PackProgressFn = std::function<void(const PackProgress&)>;

// Writes every sample of `source` into `out_dir` (created if missing; it
// must hold no files) as shards shard-NNNNNN.tar, then classes.txt and the
// index, each atomically (a temporary file renamed when whole). The last
// group may be shorter; no sample is dropped. Errors name the sample or the
// file; a sample that cannot be read fails the whole pack.
absl::StatusOr<PackIndex> WritePack(const SampleSource& source, const std::string& out_dir,
                                    const PackWriteOptions& options,
                                    const PackProgressFn& progress = nullptr);

// Indexes the WebDataset shards (*.tar, by name) already in `dir`: a sample
// is the members sharing a key (the name up to the first '.' of its last
// component); its image is KEY.jpg (or KEY.jpeg)
// and its label the integer in KEY.cls; other members are skipped. Class
// names come from dir/classes.txt (one per line, line k = label k) if there is
// one, else "0".."N-1". Headers are untrusted (ParseTarHeader); errors name
// the shard, the offset and the key. The shards and classes.txt are opened
// as PackSource::Open opens its files with `follow_symlinks`: under kInside,
// one that resolves outside `dir` is refused (PermissionDenied naming it and
// PackSourceOptions.follow_symlinks), as the server would refuse to read it.
// Writes and returns the index.
absl::StatusOr<PackIndex> IndexShards(const std::string& dir, uint32_t group_size,
                                      const PackProgressFn& progress = nullptr,
                                      FollowSymlinks follow_symlinks = FollowSymlinks::kInside);

// What VerifyPack found.
struct PackVerifyReport {
  uint64_t samples = 0;
  uint64_t bad = 0;
  std::vector<std::string> errors;  // the first 100, each naming its sample
};

// Opens the pack in `dir` (the index and every bound checked) and reads every
// sample: its tar header must describe it and its bytes must match the
// index's CRC-32. Errors only for a pack that cannot be opened (with
// PackSourceOptions.follow_symlinks = `follow_symlinks`); bad samples are in
// the report.
absl::StatusOr<PackVerifyReport> VerifyPack(
    const std::string& dir, const PackProgressFn& progress = nullptr,
    FollowSymlinks follow_symlinks = FollowSymlinks::kInside);

}  // namespace sophon

#endif  // SOPHON_DATA_PACK_WRITER_H_
