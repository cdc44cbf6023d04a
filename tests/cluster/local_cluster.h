// The set-up of the multi-server cluster tests: a dataset split into shard
// folders, and one storage server per folder on 127.0.0.1, port 0, with the
// ServerSet of a training job over them.
#ifndef SOPHON_TESTS_CLUSTER_LOCAL_CLUSTER_H_
#define SOPHON_TESTS_CLUSTER_LOCAL_CLUSTER_H_

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader/server_set.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon::testing {

// The files of `full` split into `n` shard folders (file i of the sorted
// listing goes to shard i % n), class folders kept.
inline std::vector<std::string> SplitIntoShards(const std::string& full, int n,
                                                const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<std::string> roots;
  for (int k = 0; k < n; ++k) roots.push_back(MakeTempDir(name + "_" + std::to_string(k)));
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(full)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path to = fs::path(roots[i % n]) / fs::relative(files[i], full);
    fs::create_directories(to.parent_path());
    fs::copy_file(files[i], to);
  }
  return roots;
}

struct LocalCluster {
  std::vector<std::unique_ptr<StorageServer>> servers;
  std::vector<std::unique_ptr<SampleClient>> clients;
  std::unique_ptr<ServerSet> set;
};

// One server per root (a root may repeat: replicas), 2 prep workers each,
// `before_prep[i]` on server i where given.
inline absl::StatusOr<LocalCluster> StartLocalCluster(
    const std::vector<std::string>& roots,
    const std::vector<std::function<void(uint64_t)>>& before_prep = {},
    absl::Duration connect_timeout = absl::Seconds(10)) {
  LocalCluster cluster;
  std::vector<SampleClient*> clients;
  for (size_t i = 0; i < roots.size(); ++i) {
    ServiceOptions service;
    service.prep_workers = 2;
    if (i < before_prep.size()) service.before_prep = before_prep[i];
    absl::StatusOr<LocalServer> local = StartLocalServer(roots[i], std::move(service), connect_timeout);
    if (!local.ok()) return local.status();
    cluster.servers.push_back(std::move(local->server));
    cluster.clients.push_back(std::move(local->client));
    clients.push_back(cluster.clients.back().get());
  }
  absl::StatusOr<std::unique_ptr<ServerSet>> set = ServerSet::Of(clients);
  if (!set.ok()) return set.status();
  cluster.set = *std::move(set);
  return cluster;
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLUSTER_LOCAL_CLUSTER_H_
