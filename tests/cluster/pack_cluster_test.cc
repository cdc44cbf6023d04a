// Packs served by real sophon-servers over gRPC: every sample byte-exact
// from the pack, the group size in the manifest, the group-aware order over
// two packed shards with two ranks (every sample once), a corrupt sample
// failing alone, and a shard linked from outside the pack not served.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/sampler.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "sophon/data/image_folder.h"
#include "sophon/data/pack_writer.h"
#include "sophon/net/wire.h"
#include "sophon/planning/planner.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

testing::TestDatasetOptions Dataset() {
  testing::TestDatasetOptions d;
  d.classes = 3;
  d.per_class = 9;  // 27 samples
  d.min_side = 40;
  d.max_side = 64;
  return d;
}

// Packs `root` in groups of `g` into a new folder named after `name`.
std::string Pack(const std::string& root, const std::string& name, uint32_t g) {
  std::unique_ptr<ImageFolderSource> folder = *ImageFolderSource::Open(root);
  const std::string dir = testing::MakeTempDir(name);
  PackWriteOptions options;
  options.group_size = g;
  absl::StatusOr<PackIndex> index = WritePack(*folder, dir, options);
  EXPECT_TRUE(index.ok()) << index.status();
  return dir;
}

// Fetches every sample of `local` at RAW: each byte-exact from the file of
// the dataset `root` it was packed from, with its label.
void ExpectEverySampleByteExact(const testing::LocalServer& local, const std::string& root) {
  const ServerManifest& manifest = local.client->manifest();
  ASSERT_EQ(manifest.num_samples(), 27u);
  FetchRequestBuilder builder(0, 1, AugmentOptions());
  for (uint64_t id = 0; id < 27; ++id) builder.Add(id, Stage::kRaw);
  std::unique_ptr<FetchCall> call = local.client->OpenFetch();
  ASSERT_TRUE(call->Write(builder.Take()));
  call->WritesDone();
  std::set<uint64_t> seen;
  v1::FetchResponse response;
  const SampleSource& source = local.server->source();
  while (call->Read(&response)) {
    for (const v1::Sample& s : response.samples()) {
      ASSERT_EQ(s.error_code(), 0) << s.error_message();
      const std::string path = root + "/" + std::string(source.manifest().relative_path(s.id()));
      EXPECT_EQ(s.payload(), testing::ReadFile(path)) << path;
      EXPECT_EQ(s.label(), manifest.labels[s.id()]);
      seen.insert(s.id());
    }
  }
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(seen.size(), 27u);
}

TEST(PackClusterTest, EverySampleArrivesByteExactWithItsLabel) {
  const std::string root = testing::MakeTestDataset("pack_cluster_exact", Dataset());
  const std::string pack = Pack(root, "pack_cluster_exact_pack", 4);
  absl::StatusOr<testing::LocalServer> local = testing::StartLocalServer(pack);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->client->manifest().group_size, 4u);
  ExpectEverySampleByteExact(*local, root);
}

// A shard linked to a file outside the pack folder (as to /etc/passwd) is
// not served: under the server's default link policy (inside) the server
// does not start, naming the shard; only with "all" links followed does it
// serve the shard.
TEST(PackClusterTest, AShardLinkedFromOutsideThePackIsNotServed) {
  const std::string root = testing::MakeTestDataset("pack_cluster_link", Dataset());
  const std::string pack = Pack(root, "pack_cluster_link_pack", 4);
  absl::StatusOr<PackIndex> index = ReadPackIndex(pack);
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string shard = pack + "/" + index->shards[0];
  const std::string outside = testing::MakeTempDir("pack_cluster_link_outside") + "/elsewhere";
  std::filesystem::rename(shard, outside);
  std::filesystem::create_symlink(outside, shard);
  absl::StatusOr<testing::LocalServer> refused = testing::StartLocalServer(pack);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_NE(refused.status().message().find("shard " + shard + ": resolves to"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("follow_symlinks is inside"), std::string::npos)
      << refused.status();

  StorageServerOptions options;
  options.data_dir = pack;
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.source.follow_symlinks = FollowSymlinks::kAll;
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions client;
  client.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> connected = SampleClient::Connect(client);
  ASSERT_TRUE(connected.ok()) << connected.status();
  ExpectEverySampleByteExact(testing::LocalServer{*std::move(server), *std::move(connected)},
                             root);
}

LoaderOptions Options(int batch, int rank, int world) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = 2;
  o.prefetch_batches = 2;
  o.seed = 3;
  o.rank = rank;
  o.world = world;
  o.shuffle_window = 2;
  o.pipeline.augment.crop_size = 32;
  return o;
}

// All of one rank's epoch: the ids of its batches in order, and its stats.
absl::StatusOr<std::vector<std::vector<uint64_t>>> RunRank(ServerSet* set,
                                                           const LoaderOptions& options,
                                                           LoaderEpochStats* stats) {
  FixedPolicy policy(FixedKindStage(PlannerKind::kNoOff), "nooff");
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set, options, &policy);
  if (!loader.ok()) return loader.status();
  if (absl::Status s = (*loader)->StartEpoch(0, 0, 0); !s.ok()) return s;
  std::vector<std::vector<uint64_t>> batches;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    if (!more.ok()) return more.status();
    if (!*more) break;
    batches.push_back(b.ids);
  }
  *stats = (*loader)->stats();
  return batches;
}

TEST(PackClusterTest, TheGroupOrderOverTwoPackedShardsGivesTwoRanksEverySampleOnce) {
  const std::string full = testing::MakeTestDataset("pack_cluster_ranks", Dataset());
  const std::vector<std::string> halves = testing::SplitIntoShards(full, 2, "pack_cluster_half");
  absl::StatusOr<testing::LocalCluster> cluster = testing::StartLocalCluster(
      {Pack(halves[0], "pack_cluster_half0_pack", 3), Pack(halves[1], "pack_cluster_half1_pack", 5)});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ServerSet* set = cluster->set.get();
  const uint64_t n = set->manifest().num_samples();
  ASSERT_EQ(n, 27u);
  std::vector<uint32_t> sizes;
  for (const Shard& s : set->manifest().shards()) sizes.push_back(s.group_size);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<uint32_t>{3, 5}));
  // One rank of batch 6 against two of batch 3: step k covers the same ids.
  LoaderEpochStats stats;
  absl::StatusOr<std::vector<std::vector<uint64_t>>> one = RunRank(set, Options(6, 0, 1), &stats);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<uint64_t> flat;
  for (const auto& b : *one) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(flat, GroupedEpochOrder(3, 0, ShardGroups(set->manifest().shards()), 2));
  std::multiset<uint64_t> seen;
  std::vector<std::vector<std::vector<uint64_t>>> ranks;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::vector<std::vector<uint64_t>>> mine =
        RunRank(set, Options(3, r, 2), &stats);
    ASSERT_TRUE(mine.ok()) << mine.status();
    EXPECT_EQ(stats.padding, 1);
    for (const auto& b : *mine) seen.insert(b.begin(), b.end());
    ranks.push_back(*std::move(mine));
  }
  EXPECT_EQ(seen.size(), 28u);  // 27 and one padding sample
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), 27u);
  ASSERT_EQ(ranks[0].size(), one->size());
  for (size_t k = 0; k + 1 < one->size(); ++k) {
    std::set<uint64_t> step(ranks[0][k].begin(), ranks[0][k].end());
    step.insert(ranks[1][k].begin(), ranks[1][k].end());
    EXPECT_EQ(step, std::set<uint64_t>((*one)[k].begin(), (*one)[k].end())) << "step " << k;
  }
}

TEST(PackClusterTest, ACorruptSampleIsSkippedAloneNamingItsShard) {
  const std::string root = testing::MakeTestDataset("pack_cluster_corrupt", Dataset());
  const std::string pack = Pack(root, "pack_cluster_corrupt_pack", 4);
  absl::StatusOr<PackIndex> index = ReadPackIndex(pack);
  ASSERT_TRUE(index.ok());
  const PackedSample& victim = index->samples[10];
  const std::string shard = pack + "/" + index->shards[victim.shard];
  std::string bytes = testing::ReadFile(shard);
  bytes[victim.offset + victim.size / 2] ^= 0x20;
  testing::WriteFile(shard, bytes);
  absl::StatusOr<testing::LocalCluster> cluster = testing::StartLocalCluster({pack});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoaderEpochStats stats;
  absl::StatusOr<std::vector<std::vector<uint64_t>>> batches =
      RunRank(cluster->set.get(), Options(4, 0, 1), &stats);
  ASSERT_TRUE(batches.ok()) << batches.status();
  std::set<uint64_t> seen;
  for (const auto& b : *batches) seen.insert(b.begin(), b.end());
  EXPECT_EQ(stats.skipped, 1u);
  EXPECT_EQ(seen.size(), 26u);
  EXPECT_EQ(seen.count(10), 0u);
  // The server names the sample, its shard and offset.
  FetchRequestBuilder builder(0, 1, AugmentOptions());
  builder.Add(10, Stage::kRaw);
  std::unique_ptr<FetchCall> call = cluster->clients[0]->OpenFetch();
  ASSERT_TRUE(call->Write(builder.Take()));
  call->WritesDone();
  v1::FetchResponse response;
  ASSERT_TRUE(call->Read(&response));
  ASSERT_EQ(response.samples_size(), 1);
  EXPECT_EQ(response.samples(0).error_code(), static_cast<int>(absl::StatusCode::kDataLoss));
  EXPECT_NE(response.samples(0).error_message().find(index->shards[victim.shard] +
                                                      " at offset " +
                                                      std::to_string(victim.offset)),
            std::string::npos)
      << response.samples(0).error_message();
  while (call->Read(&response)) {
  }
  EXPECT_TRUE(call->Finish().ok());
}

}  // namespace
}  // namespace sophon
