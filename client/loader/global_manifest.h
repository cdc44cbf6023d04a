// The training job's view of a dataset spread over several storage servers:
// one global manifest, the deterministic union of what the servers hold.
//
// Servers whose manifests have the same fingerprint hold the same samples
// (replicas of one shard); servers with different fingerprints hold different
// shards. Shards are ordered by fingerprint, so the global manifest is the
// same whatever the order of the addresses: shard k's samples take the global
// ids [base_k, base_k + size_k), in the shard's own order. Class names are
// merged by name (sorted), and every shard's labels are mapped onto them, so a
// class has one label wherever its samples live. One server: the global
// manifest is its manifest (same ids, labels, fingerprint).
//
// What is kept per sample is compact (a label and a size, 8 bytes); relative
// paths stay on the servers, whose errors name them.
#ifndef SOPHON_CLIENT_LOADER_GLOBAL_MANIFEST_H_
#define SOPHON_CLIENT_LOADER_GLOBAL_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader/server_manifest.h"

namespace sophon {

// One shard: a set of samples held by one or more servers (its replicas).
struct Shard {
  uint64_t fingerprint = 0;
  std::string dataset_name;
  uint64_t base = 0;         // global id of its first sample
  uint64_t size = 0;         // samples
  uint32_t group_size = 1;   // the server reads groups of this many samples (a pack)
  std::vector<int> servers;  // indices of the servers that hold it, ascending
};

enum class DatasetLayout {
  kSingle,      // one server
  kSharded,     // several servers, each its own shard
  kReplicated,  // several servers, all holding the same samples
  kMixed,       // several shards, at least one held by several servers
};
const char* DatasetLayoutName(DatasetLayout layout);

class GlobalManifest {
 public:
  // `manifests[i]` is server i's, read from `addresses[i]` (for errors).
  // InvalidArgument naming both addresses when two servers hold the same
  // shard with different class names or sample counts (a fingerprint
  // collision or a malformed manifest), or when a manifest's labels or sizes
  // do not match its sample count.
  static absl::StatusOr<GlobalManifest> Build(
      const std::vector<const ServerManifest*>& manifests,
      const std::vector<std::string>& addresses);

  uint64_t num_samples() const { return labels_.size(); }
  int num_servers() const { return num_servers_; }
  uint32_t label(uint64_t id) const { return labels_[id]; }
  // Encoded bytes, saturated at UINT32_MAX (SaturatedSize).
  uint64_t raw_size(uint64_t id) const { return raw_sizes_[id]; }
  // What changes when the sample's file is edited (the first replica's
  // ServerManifest.versions); 0 = unknown.
  uint32_t version(uint64_t id) const { return versions_[id]; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  // One shard: its fingerprint; several: FNV-1a over the shards'
  // fingerprints in order.
  uint64_t fingerprint() const { return fingerprint_; }
  // One shard: its dataset's name; several: the distinct names joined by '+'.
  const std::string& name() const { return name_; }
  DatasetLayout layout() const { return layout_; }
  const std::vector<Shard>& shards() const { return shards_; }
  // The shard holding global id `id`. REQUIRES: id < num_samples().
  int ShardOf(uint64_t id) const;
  // `id` in its shard's (every replica's) own manifest.
  uint64_t LocalId(uint64_t id) const { return id - shards_[ShardOf(id)].base; }
  // The shard that server `server` holds.
  int ShardOfServer(int server) const { return shard_of_server_[server]; }
  // "sharded: 3 shards on 3 servers (a: 1000 samples, ...)", for the start-up log.
  std::string Describe(const std::vector<std::string>& addresses) const;

 private:
  int num_servers_ = 0;
  std::vector<uint32_t> labels_;
  std::vector<uint32_t> raw_sizes_;  // SaturatedSize
  std::vector<uint32_t> versions_;
  std::vector<std::string> class_names_;
  uint64_t fingerprint_ = 0;
  std::string name_;
  DatasetLayout layout_ = DatasetLayout::kSingle;
  std::vector<Shard> shards_;
  std::vector<int> shard_of_server_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_GLOBAL_MANIFEST_H_
