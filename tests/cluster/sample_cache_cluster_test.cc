// The training node's sample cache (LoaderOptions.sample_cache, sophon-train
// --local-cache-bytes) against a real sophon-server on 127.0.0.1 (port 0):
// what later epochs take from the cache instead of fetching, batches equal to
// those of a loader without a cache, a corrupt entry fetched again, a job
// resumed from a checkpoint's cursor over a warm disk cache, and two ranks of
// a node sharing one copy on disk.
#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/sample_cache.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kSamples = 12;

class SampleCacheClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = kSamples / 2;
    dir_ = testing::MakeTestDataset("sample_cache_cluster", dopts);
    StartServer();
  }

  // A storage server on dir_ (again, after a test stopped it) and a client of it.
  void StartServer() {
    client_.reset();
    server_.reset();
    ServiceOptions service;
    service.prep_workers = 2;
    absl::StatusOr<testing::LocalServer> local = testing::StartLocalServer(dir_, std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
  }

  // Sample id -> its float tensor, for one epoch of a loader whose policy
  // asks for every sample at `stage`.
  using Epoch = std::map<uint64_t, std::vector<float>>;
  Epoch RunEpoch(Loader& loader, uint64_t epoch) {
    EXPECT_TRUE(loader.StartEpoch(epoch).ok());
    Epoch got;
    Batch b;
    const size_t per = 3 * 32 * 32;
    while (true) {
      absl::StatusOr<bool> more = loader.Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      for (int i = 0; i < b.n; ++i) {
        got[b.ids[i]] = std::vector<float>(b.images.begin() + i * per,
                                           b.images.begin() + (i + 1) * per);
      }
    }
    EXPECT_EQ(got.size(), static_cast<size_t>(kSamples));
    return got;
  }

  // The batches of one epoch from global position `start` on, in order:
  // (ids, images) each.
  using Batches = std::vector<std::pair<std::vector<uint64_t>, std::vector<float>>>;
  Batches RunFrom(Loader& loader, uint64_t epoch, int64_t start) {
    EXPECT_TRUE(loader.StartEpoch(epoch, 0, start).ok());
    Batches got;
    Batch b;
    while (true) {
      absl::StatusOr<bool> more = loader.Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      got.emplace_back(std::vector<uint64_t>(b.ids.begin(), b.ids.begin() + b.n),
                       std::vector<float>(b.images.begin(), b.images.end()));
    }
    return got;
  }

  // A cache on disk only (no memory tier), in `folder`, as each process of
  // a node opens it.
  std::shared_ptr<SampleCache> OpenDiskCache(const std::string& folder) {
    LocalCacheOptions options;
    options.dir = folder;
    options.dir_bytes = 2 * WholeSet() + kSamples * DiskSampleCache::kHeaderBytes;
    absl::StatusOr<std::shared_ptr<SampleCache>> cache =
        OpenSampleCache(options, server_->source().fingerprint(),
                        server_->source().manifest().size(), 0, client_->manifest().versions);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  // A job whose epoch 0 fetches every sample whole into a disk cache in
  // `folder`, then stops.
  void FillDiskCache(const std::string& folder) {
    std::shared_ptr<SampleCache> cache = OpenDiskCache(folder);
    FixedPolicy policy(Stage::kRaw, "nooff");
    std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
    ASSERT_TRUE(loader && cache);
    RunEpoch(*loader, 0);
    ASSERT_EQ(loader->stats().sample_cache_inserted, static_cast<uint64_t>(kSamples));
  }

  std::unique_ptr<Loader> MakeLoader(FixedPolicy* policy, std::shared_ptr<SampleCache> cache,
                                     int rank = 0, int world = 1) {
    LoaderOptions options;
    options.rank = rank;
    options.world = world;
    options.batch_size = 4;
    options.workers = 2;
    options.pipeline.augment.crop_size = 32;
    options.sample_cache = std::move(cache);
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, policy);
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }

  std::shared_ptr<SampleCache> MakeCache(int64_t bytes) {
    CacheOptions options;
    options.bytes = bytes;
    absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::shared_ptr<SampleCache>(*std::move(cache)) : nullptr;
  }

  // What the cache charges for every sample of the dataset.
  int64_t WholeSet() const {
    int64_t total = 0;
    for (uint64_t id = 0; id < kSamples; ++id) {
      total += static_cast<int64_t>(server_->source().manifest().raw_size(id)) +
               kCacheEntryOverheadBytes;
    }
    return total;
  }

  std::string dir_;
  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

TEST_F(SampleCacheClusterTest, LaterEpochsTakeEverySampleFromACacheThatHoldsTheSet) {
  FixedPolicy nooff(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> reference = MakeLoader(&nooff, nullptr);
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet());
  FixedPolicy cached_policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> loader = MakeLoader(&cached_policy, cache);
  ASSERT_TRUE(reference && loader && cache);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const Epoch want = RunEpoch(*reference, epoch);
    const Epoch got = RunEpoch(*loader, epoch);
    EXPECT_EQ(got, want) << "epoch " << epoch << ": batches differ from the uncached loader's";
    const LoaderEpochStats stats = loader->stats();
    if (epoch == 0) {
      EXPECT_EQ(stats.requested, static_cast<uint64_t>(kSamples));
      EXPECT_EQ(stats.sample_cache_hits, 0u);
      EXPECT_EQ(stats.sample_cache_misses, static_cast<uint64_t>(kSamples));
      EXPECT_EQ(stats.sample_cache_inserted, static_cast<uint64_t>(kSamples));
    } else {
      EXPECT_EQ(stats.requested, 0u) << "epoch " << epoch << " fetched samples";
      EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples));
      EXPECT_EQ(stats.bytes_by_stage[StageIndex(Stage::kRaw)], 0u);
    }
    EXPECT_EQ(stats.sample_cache_entries, kSamples);
    EXPECT_EQ(stats.sample_cache_bytes, WholeSet());
  }
}

TEST_F(SampleCacheClusterTest, AHalfCacheHitsWhatTheFirstEpochKept) {
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet() / 2);
  std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
  ASSERT_TRUE(loader && cache);
  RunEpoch(*loader, 0);
  const uint64_t kept = loader->stats().sample_cache_inserted;
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, static_cast<uint64_t>(kSamples));
  for (uint64_t epoch = 1; epoch < 3; ++epoch) {
    RunEpoch(*loader, epoch);
    const LoaderEpochStats stats = loader->stats();
    EXPECT_EQ(stats.sample_cache_hits, kept) << "epoch " << epoch;
    EXPECT_EQ(stats.sample_cache_misses, kSamples - kept) << "epoch " << epoch;
    EXPECT_EQ(stats.requested, kSamples - kept) << "epoch " << epoch;
    EXPECT_EQ(stats.sample_cache_inserted, 0u) << "noevict: a full cache keeps nothing more";
  }
  EXPECT_LE(cache->stats().bytes, WholeSet() / 2);
}

TEST_F(SampleCacheClusterTest, ACorruptEntryIsFetchedAgainNotTrainedOn) {
  FixedPolicy nooff(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> reference = MakeLoader(&nooff, nullptr);
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet());
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
  ASSERT_TRUE(reference && loader && cache);
  RunEpoch(*loader, 0);
  ASSERT_TRUE(cache->CorruptForTest(5));
  const Epoch got = RunEpoch(*loader, 1);
  EXPECT_EQ(got, RunEpoch(*reference, 1));
  const LoaderEpochStats stats = loader->stats();
  EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples - 1));
  EXPECT_EQ(stats.requested, 1u);
  EXPECT_EQ(stats.sample_cache_inserted, 1u) << "the refetched sample is kept again";
  EXPECT_EQ(cache->stats().corrupt, 1u);
}

TEST_F(SampleCacheClusterTest, AResumedJobOverAWarmDiskCacheFetchesNothingAndGetsTheSameBatches) {
  const std::string folder = testing::MakeTempDir("sample_cache_resume");
  // The first job: epoch 0 fills the disk cache, then the job stops.
  ASSERT_NO_FATAL_FAILURE(FillDiskCache(folder));
  // The restarted job resumes epoch 1 from a checkpoint's cursor (after the
  // first batch) with a cache it opened again: every sample comes off disk.
  const int64_t cursor = 4;
  std::shared_ptr<SampleCache> cache = OpenDiskCache(folder);
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> resumed = MakeLoader(&policy, cache);
  FixedPolicy nooff(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> reference = MakeLoader(&nooff, nullptr);
  ASSERT_TRUE(resumed && reference && cache);
  const Batches want = RunFrom(*reference, 1, cursor);
  const Batches got = RunFrom(*resumed, 1, cursor);
  ASSERT_EQ(want.size(), static_cast<size_t>((kSamples - cursor) / 4));
  EXPECT_EQ(got, want) << "the resumed job's batches differ from an uncached loader's";
  const LoaderEpochStats stats = resumed->stats();
  EXPECT_EQ(stats.requested, 0u);
  EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples - cursor));
  EXPECT_EQ(cache->stats().disk_hits, static_cast<uint64_t>(kSamples - cursor));
}

// A sample's file edited between two runs to the same size (its bytes
// differ, its modification time moved): the dataset's fingerprint is the
// same, but the entry of the old file is never served: removed unread, the
// sample fetched again and the new file kept.
TEST_F(SampleCacheClusterTest, AFileEditedToTheSameSizeIsFetchedAgainNotServedFromTheCache) {
  const std::string folder = testing::MakeTempDir("sample_cache_edit");
  const uint64_t edited = 5;
  ASSERT_NO_FATAL_FAILURE(FillDiskCache(folder));
  // The edit: one byte of the JFIF header's density (the image decodes the
  // same), the file's size unchanged, its time a second later.
  const std::string path =
      dir_ + "/" + std::string(server_->source().manifest().relative_path(edited));
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 20u);
  ASSERT_EQ(static_cast<unsigned char>(bytes[2]), 0xFF);
  ASSERT_EQ(static_cast<unsigned char>(bytes[3]), 0xE0) << "no JFIF header in " << path;
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  bytes[15] = static_cast<char>(bytes[15] ^ 1);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const struct timespec times[2] = {before.st_atim, {before.st_mtim.tv_sec + 1, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  // The storage node restarts on the edited folder: same fingerprint, another version.
  const uint64_t fingerprint = server_->source().fingerprint();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ASSERT_EQ(server_->source().fingerprint(), fingerprint);

  std::shared_ptr<SampleCache> cache = OpenDiskCache(folder);
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
  ASSERT_TRUE(loader && cache);
  RunEpoch(*loader, 1);
  const LoaderEpochStats stats = loader->stats();
  EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples - 1));
  EXPECT_EQ(stats.requested, 1u);  // the edited sample, fetched again
  ASSERT_NE(cache->disk(), nullptr);
  EXPECT_EQ(cache->disk()->stats().stale, 1u);
  // What the cache holds now is the edited file.
  std::string held;
  ASSERT_TRUE(cache->Get(edited, &held));
  EXPECT_EQ(held, bytes);
}

TEST_F(SampleCacheClusterTest, TwoRanksOfANodeKeepOneCopyOnDiskAndTakeEachOthersSamples) {
  const std::string folder = testing::MakeTempDir("sample_cache_ranks");
  // Two ranks, each with the cache its own process would open.
  std::shared_ptr<SampleCache> cache0 = OpenDiskCache(folder);
  std::shared_ptr<SampleCache> cache1 = OpenDiskCache(folder);
  FixedPolicy policy0(Stage::kRaw, "nooff");
  FixedPolicy policy1(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> rank0 = MakeLoader(&policy0, cache0, 0, 2);
  std::unique_ptr<Loader> rank1 = MakeLoader(&policy1, cache1, 1, 2);
  ASSERT_TRUE(rank0 && rank1 && cache0 && cache1);
  std::set<uint64_t> seen0;
  for (const auto& [ids, images] : RunFrom(*rank0, 0, 0)) seen0.insert(ids.begin(), ids.end());
  RunFrom(*rank1, 0, 0);
  const uint64_t written = cache0->disk()->stats().written + cache1->disk()->stats().written;
  EXPECT_EQ(written, static_cast<uint64_t>(kSamples)) << "each sample written once";
  int64_t one_copy = 0;
  for (uint64_t id = 0; id < kSamples; ++id) {
    one_copy += DiskSampleCache::kHeaderBytes +
                static_cast<int64_t>(server_->source().manifest().raw_size(id));
  }
  EXPECT_EQ(cache1->disk()->stats().usage_bytes, one_copy) << "the node holds one copy";
  // Epoch 1 shuffles again: rank 0 now wants samples rank 1 fetched, and
  // takes them off disk too.
  std::set<uint64_t> seen1;
  for (const auto& [ids, images] : RunFrom(*rank0, 1, 0)) seen1.insert(ids.begin(), ids.end());
  EXPECT_EQ(rank0->stats().requested, 0u);
  EXPECT_EQ(rank0->stats().sample_cache_hits, seen1.size());
  bool from_rank1 = false;
  for (uint64_t id : seen1) from_rank1 |= seen0.count(id) == 0;
  EXPECT_TRUE(from_rank1) << "epoch 1's share of rank 0 is epoch 0's again: nothing shared shown";
  RunFrom(*rank1, 1, 0);
  EXPECT_EQ(rank1->stats().requested, 0u);
}

}  // namespace
}  // namespace sophon
