// The order in which an epoch visits the samples, and each rank's share of it.
#ifndef SOPHON_CLIENT_LOADER_SAMPLER_H_
#define SOPHON_CLIENT_LOADER_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "client/loader/global_manifest.h"

namespace sophon {

// A run of consecutive global ids that the storage reads together (a group of
// a pack, sample_source.h's group_size()).
struct SampleGroup {
  uint64_t first = 0;
  uint64_t count = 0;
};

// The groups of a job's shards: each shard's ids cut in runs of its
// group_size from its base (the last run of a shard may be shorter).
std::vector<SampleGroup> ShardGroups(const std::vector<Shard>& shards);

// The group-aware order: the groups shuffled, then every position draws a
// uniformly random sample among the unvisited samples of a window of `window`
// open groups; a group whose samples are all drawn is replaced by the next
// one. A pure function of (seed, epoch, groups, window) like EpochOrder, so
// ranks (RankSlice) and resumption work the same; every sample appears once.
// The storage reads about `window` groups at a time, each once.
// REQUIRES: window >= 1; the groups partition [0, total), none empty.
std::vector<uint64_t> GroupedEpochOrder(uint64_t seed, uint64_t epoch,
                                        const std::vector<SampleGroup>& groups, int window);

// A seeded permutation of [0, num_samples) for `epoch` (Fisher-Yates driven by
// the counter-based generator), the same on every machine. With world > 1,
// rank r takes every world-th entry starting at r (no padding; see RankSlice).
// REQUIRES: 0 <= rank < world.
std::vector<uint64_t> EpochOrder(uint64_t seed, uint64_t epoch, uint64_t num_samples,
                                 bool shuffle = true, int rank = 0, int world = 1);

// The epoch's global order padded for `world` ranks as PyTorch's
// DistributedSampler pads it: wrapped around from its start until its length
// is a multiple of world, so that every rank gets the same number of samples
// (and takes part in the same number of steps). Positions [0, num_samples)
// are EpochOrder's whatever the world size; only the padding differs.
int64_t PaddedEpochLength(uint64_t num_samples, int world);

// Rank `rank`'s share of the epoch from global position `start` on: the
// positions start + rank + k * world below PaddedEpochLength, in order. With a
// per-rank batch of b, step j of every rank covers the global positions
// [start + j*b*world, start + (j+1)*b*world): the global batches do not depend
// on the world size, so a run stopped at a position that is a multiple of the
// global batch resumes with any world size (same global batch) with no sample
// repeated or skipped. `order` is EpochOrder(..., rank 0, world 1).
// REQUIRES: 0 <= rank < world, start >= 0.
std::vector<uint64_t> RankSlice(const std::vector<uint64_t>& order, int rank, int world,
                                int64_t start);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SAMPLER_H_
