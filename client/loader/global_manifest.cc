#include "client/loader/global_manifest.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sophon {
namespace {

uint64_t Fnv1a(const std::vector<uint64_t>& values) {
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  }
  return h;
}

bool SameShard(const ServerManifest& a, const ServerManifest& b) {
  return a.num_samples() == b.num_samples() && a.class_names == b.class_names;
}

}  // namespace

const char* DatasetLayoutName(DatasetLayout layout) {
  switch (layout) {
    case DatasetLayout::kSingle:
      return "single server";
    case DatasetLayout::kSharded:
      return "sharded";
    case DatasetLayout::kReplicated:
      return "replicated";
    case DatasetLayout::kMixed:
      return "mixed (sharded, some shards replicated)";
  }
  return "?";
}

absl::StatusOr<GlobalManifest> GlobalManifest::Build(
    const std::vector<const ServerManifest*>& manifests,
    const std::vector<std::string>& addresses) {
  if (manifests.empty() || manifests.size() != addresses.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GlobalManifest needs one manifest per server (",
                                                   manifests.size(), " manifests, ",
                                                   addresses.size(), " addresses)"));
  }
  GlobalManifest g;
  g.num_servers_ = static_cast<int>(manifests.size());
  // Group the servers by fingerprint: std::map orders the shards by it.
  std::map<uint64_t, std::vector<int>> by_fingerprint;
  for (int i = 0; i < g.num_servers_; ++i) {
    const ServerManifest& m = *manifests[i];
    if (m.raw_sizes.size() != m.labels.size()) {
      return absl::InvalidArgumentError(absl::StrCat("storage server ", addresses[i],
                                                     " sent a manifest with ", m.labels.size(),
                                                     " labels and ", m.raw_sizes.size(), " sizes"));
    }
    for (uint32_t label : m.labels) {
      if (label >= m.class_names.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("storage server ", addresses[i], " sent a manifest with label ", label,
                         " of ", m.class_names.size(), " classes"));
      }
    }
    std::vector<int>& group = by_fingerprint[m.fingerprint];
    if (!group.empty() && !SameShard(*manifests[group[0]], m)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storage servers ", addresses[group[0]], " and ", addresses[i],
          " report the same dataset fingerprint ", m.fingerprint,
          " but different samples or classes: give each shard's servers the same files"));
    }
    group.push_back(i);
  }
  std::set<std::string> names;
  std::set<std::string> classes;
  for (const auto& [fingerprint, servers] : by_fingerprint) {
    const ServerManifest& m = *manifests[servers[0]];
    names.insert(m.dataset_name);
    classes.insert(m.class_names.begin(), m.class_names.end());
  }
  g.class_names_.assign(classes.begin(), classes.end());
  g.name_ = absl::StrJoin(names, "+");
  g.shard_of_server_.assign(g.num_servers_, -1);
  uint64_t total = 0;
  for (const auto& [fingerprint, servers] : by_fingerprint) {
    total += manifests[servers[0]]->num_samples();
  }
  g.labels_.reserve(total);
  g.raw_sizes_.reserve(total);
  g.versions_.reserve(total);
  std::vector<uint64_t> fingerprints;
  bool replicated = false;
  for (const auto& [fingerprint, servers] : by_fingerprint) {
    const ServerManifest& m = *manifests[servers[0]];
    Shard shard;
    shard.fingerprint = fingerprint;
    shard.dataset_name = m.dataset_name;
    shard.base = g.labels_.size();
    shard.size = m.num_samples();
    shard.group_size = m.group_size;
    shard.servers = servers;
    replicated = replicated || servers.size() > 1;
    for (int s : servers) g.shard_of_server_[s] = static_cast<int>(g.shards_.size());
    // This shard's labels onto the merged class names.
    std::vector<uint32_t> to_global(m.class_names.size());
    for (size_t c = 0; c < m.class_names.size(); ++c) {
      to_global[c] = static_cast<uint32_t>(
          std::lower_bound(g.class_names_.begin(), g.class_names_.end(), m.class_names[c]) -
          g.class_names_.begin());
    }
    for (uint32_t label : m.labels) g.labels_.push_back(to_global[label]);
    g.raw_sizes_.insert(g.raw_sizes_.end(), m.raw_sizes.begin(), m.raw_sizes.end());
    if (m.versions.size() == m.raw_sizes.size()) {
      g.versions_.insert(g.versions_.end(), m.versions.begin(), m.versions.end());
    } else {
      g.versions_.resize(g.raw_sizes_.size(), 0);  // unknown
    }
    fingerprints.push_back(fingerprint);
    g.shards_.push_back(std::move(shard));
  }
  g.fingerprint_ = fingerprints.size() == 1 ? fingerprints[0] : Fnv1a(fingerprints);
  if (g.num_servers_ == 1) {
    g.layout_ = DatasetLayout::kSingle;
  } else if (g.shards_.size() == 1) {
    g.layout_ = DatasetLayout::kReplicated;
  } else {
    g.layout_ = replicated ? DatasetLayout::kMixed : DatasetLayout::kSharded;
  }
  return g;
}

int GlobalManifest::ShardOf(uint64_t id) const {
  // The last shard whose base is <= id (shards are few: a linear scan would
  // do, but a binary search costs nothing).
  auto it = std::upper_bound(shards_.begin(), shards_.end(), id,
                             [](uint64_t v, const Shard& s) { return v < s.base; });
  return static_cast<int>(it - shards_.begin()) - 1;
}

std::string GlobalManifest::Describe(const std::vector<std::string>& addresses) const {
  std::vector<std::string> parts;
  for (const Shard& s : shards_) {
    std::vector<std::string> where;
    for (int i : s.servers) where.push_back(addresses[i]);
    parts.push_back(absl::StrCat("'", s.dataset_name, "' ", s.size, " samples (fingerprint ",
                                 s.fingerprint, ") on ", absl::StrJoin(where, ", ")));
  }
  return absl::StrCat(DatasetLayoutName(layout_), ": ", num_samples(), " samples, ",
                      class_names_.size(), " classes, ", shards_.size(),
                      shards_.size() == 1 ? " shard" : " shards", " on ", num_servers_,
                      num_servers_ == 1 ? " server" : " servers", " [", absl::StrJoin(parts, "; "),
                      "]");
}

}  // namespace sophon
