// Several storage servers (real gRPC on 127.0.0.1, port 0, real files) and
// several data-parallel ranks' loaders: sharded, replicated and mixed layouts,
// a server lost mid-epoch, and resuming at a data cursor with another world
// size.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/loader/loader.h"
#include "client/loader/sampler.h"
#include "client/loader/server_set.h"
#include "client/offload/cluster_policy.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/profile_csv.h"
#include "tests/cluster/local_cluster.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

namespace fs = std::filesystem;
using testing::SplitIntoShards;

// One rank's epoch: batches by index.
struct RankEpoch {
  std::vector<Batch> batches;
  LoaderEpochStats stats;
};

class MultiServerTest : public ::testing::Test {
 protected:
  // Starts one server per root (a root may repeat: replicas) and the set.
  void StartServers(const std::vector<std::string>& roots,
                    std::vector<std::function<void(uint64_t)>> before_prep = {},
                    absl::Duration connect_timeout = absl::Seconds(10)) {
    absl::StatusOr<testing::LocalCluster> cluster =
        testing::StartLocalCluster(roots, before_prep, connect_timeout);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    servers_ = std::move(cluster->servers);
    clients_ = std::move(cluster->clients);
    set_ = std::move(cluster->set);
  }

  static LoaderOptions Options(int batch, int rank, int world) {
    LoaderOptions o;
    o.batch_size = batch;
    o.workers = 2;
    o.prefetch_batches = 2;
    o.seed = 5;
    o.rank = rank;
    o.world = world;
    o.pipeline.augment.crop_size = 32;
    return o;
  }

  absl::StatusOr<RankEpoch> RunRank(PlannerKind mode, const LoaderOptions& options,
                                    uint64_t epoch = 0, int64_t start = 0,
                                    int64_t max_batches = 0) {
    FixedPolicy policy(FixedKindStage(mode), ModeName(mode));
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set_.get(), options, &policy);
    if (!loader.ok()) return loader.status();
    if (absl::Status s = (*loader)->StartEpoch(epoch, max_batches, start); !s.ok()) return s;
    RankEpoch out;
    while (true) {
      Batch b;
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) break;
      out.batches.push_back(std::move(b));
    }
    out.stats = (*loader)->stats();
    return out;
  }

  // Every id's image, from a set of batches.
  static std::map<uint64_t, std::vector<float>> ImagesById(const std::vector<Batch>& batches) {
    std::map<uint64_t, std::vector<float>> out;
    for (const Batch& b : batches) {
      const size_t per = b.images.size() / std::max(1, b.n);
      for (int i = 0; i < b.n; ++i) {
        out[b.ids[i]].assign(b.images.begin() + i * per, b.images.begin() + (i + 1) * per);
      }
    }
    return out;
  }

  // Checks that 2 ranks of batch b see what 1 rank of batch 2b sees: every
  // sample once plus the stated padding, step k's union equal to the single
  // run's batch k, the same pixels and labels per id.
  void CheckTwoRanksMatchOne(PlannerKind mode, const std::string& what) {
    const uint64_t n = set_->manifest().num_samples();
    absl::StatusOr<RankEpoch> one = RunRank(mode, Options(6, 0, 1));
    ASSERT_TRUE(one.ok()) << what << ": " << one.status();
    std::vector<RankEpoch> ranks;
    for (int r = 0; r < 2; ++r) {
      absl::StatusOr<RankEpoch> e = RunRank(mode, Options(3, r, 2));
      ASSERT_TRUE(e.ok()) << what << " rank " << r << ": " << e.status();
      ranks.push_back(*std::move(e));
    }
    const int64_t padding = PaddedEpochLength(n, 2) - static_cast<int64_t>(n);
    EXPECT_EQ(ranks[0].stats.padding, padding) << what;
    ASSERT_EQ(ranks[0].batches.size(), ranks[1].batches.size()) << what;
    ASSERT_EQ(ranks[0].batches.size(), one->batches.size()) << what;
    // The padding repeats the first samples of the epoch's order.
    const std::vector<uint64_t> order = EpochOrder(5, 0, n);
    const std::set<uint64_t> padded(order.begin(), order.begin() + padding);
    std::multiset<uint64_t> seen;
    for (size_t k = 0; k < one->batches.size(); ++k) {
      std::multiset<uint64_t> ranks_union;
      for (const RankEpoch& r : ranks) {
        ranks_union.insert(r.batches[k].ids.begin(), r.batches[k].ids.end());
        seen.insert(r.batches[k].ids.begin(), r.batches[k].ids.end());
        EXPECT_EQ(r.batches[k].cursor, std::min<int64_t>((k + 1) * 6, n + padding));
      }
      // Step k of the two ranks is batch k of the one, plus padding at the end.
      for (uint64_t id : one->batches[k].ids) {
        EXPECT_EQ(ranks_union.count(id), 1u) << what << " step " << k << " id " << id;
        ranks_union.erase(id);
      }
      for (uint64_t id : ranks_union) {
        EXPECT_TRUE(padded.count(id)) << what << " step " << k << ": extra id " << id;
        EXPECT_EQ(k + 1, one->batches.size()) << what << ": padding before the last step";
      }
    }
    EXPECT_EQ(seen.size(), n + padding) << what;
    EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), n) << what;
    const auto single = ImagesById(one->batches);
    for (const RankEpoch& r : ranks) {
      for (const auto& [id, pixels] : ImagesById(r.batches)) {
        ASSERT_TRUE(single.count(id)) << what << " id " << id;
        EXPECT_TRUE(pixels == single.at(id)) << what << ": id " << id << " differs";
      }
      for (const Batch& b : r.batches) {
        for (int i = 0; i < b.n; ++i) EXPECT_EQ(b.labels[i], set_->manifest().label(b.ids[i]));
      }
    }
    uint64_t from_servers = 0;
    for (const ServerLoadStats& s : ranks[0].stats.servers) from_servers += s.samples;
    EXPECT_EQ(from_servers, ranks[0].stats.samples) << what;
  }

  std::vector<std::unique_ptr<StorageServer>> servers_;
  std::vector<std::unique_ptr<SampleClient>> clients_;
  std::unique_ptr<ServerSet> set_;
};

testing::TestDatasetOptions SmallDataset() {
  testing::TestDatasetOptions d;
  d.classes = 3;
  d.per_class = 9;  // 27 samples: odd, so two ranks need a padding sample
  d.min_side = 40;
  d.max_side = 64;
  return d;
}

TEST_F(MultiServerTest, ShardedLayoutServesTheUnionWithGlobalLabelsAndKeys) {
  const std::string full = testing::MakeTestDataset("ms_sharded_full", SmallDataset());
  // Shard 2 lacks a class: labels must still be merged by name.
  std::vector<std::string> roots = SplitIntoShards(full, 3, "ms_sharded");
  fs::remove_all(fs::path(roots[2]) / "class_1");
  StartServers(roots);
  ASSERT_EQ(set_->manifest().layout(), DatasetLayout::kSharded);
  EXPECT_EQ(set_->manifest().class_names().size(), 3u);
  for (uint64_t id = 0; id < set_->manifest().num_samples(); ++id) {
    // Each sample's label is its class folder's name in the merged list (the
    // path from the server's own manifest: paths do not cross the network).
    const Shard& shard = set_->manifest().shards()[set_->manifest().ShardOf(id)];
    const std::string path =
        servers_[shard.servers[0]]->source().entry(set_->manifest().LocalId(id)).relative_path;
    EXPECT_EQ(set_->manifest().class_names()[set_->manifest().label(id)],
              path.substr(0, path.find('/')))
        << path;
  }
  CheckTwoRanksMatchOne(PlannerKind::kNoOff, "sharded nooff");
  // The servers key each sample's augmentation by its global id: prepared
  // there (alloff) it is byte for byte what this node prepares (nooff).
  absl::StatusOr<RankEpoch> local = RunRank(PlannerKind::kNoOff, Options(6, 0, 1), 1);
  absl::StatusOr<RankEpoch> remote = RunRank(PlannerKind::kAllOff, Options(6, 0, 1), 1);
  ASSERT_TRUE(local.ok() && remote.ok());
  const auto a = ImagesById(local->batches);
  const auto b = ImagesById(remote->batches);
  ASSERT_EQ(a.size(), set_->manifest().num_samples());
  for (const auto& [id, pixels] : a) {
    EXPECT_TRUE(pixels == b.at(id)) << "sample " << id << " differs between nooff and alloff";
  }
  for (const ServerLoadStats& s : remote->stats.servers) EXPECT_GT(s.samples, 0u) << s.address;
}

TEST_F(MultiServerTest, ReplicatedLayoutMatchesOneServerByteForByteAndSpreadsTheLoad) {
  const std::string full = testing::MakeTestDataset("ms_replicated", SmallDataset());
  StartServers({full});
  absl::StatusOr<RankEpoch> alone = RunRank(PlannerKind::kResizeOff, Options(6, 0, 1));
  ASSERT_TRUE(alone.ok()) << alone.status();
  servers_.clear();
  clients_.clear();
  set_.reset();
  StartServers({full, full, full});
  ASSERT_EQ(set_->manifest().layout(), DatasetLayout::kReplicated);
  absl::StatusOr<RankEpoch> three = RunRank(PlannerKind::kResizeOff, Options(6, 0, 1));
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(alone->batches.size(), three->batches.size());
  for (size_t k = 0; k < alone->batches.size(); ++k) {
    EXPECT_EQ(alone->batches[k].ids, three->batches[k].ids);
    EXPECT_TRUE(alone->batches[k].images == three->batches[k].images) << "batch " << k;
  }
  for (const ServerLoadStats& s : three->stats.servers) EXPECT_GT(s.samples, 0u) << s.address;
  CheckTwoRanksMatchOne(PlannerKind::kResizeOff, "replicated");
}

TEST_F(MultiServerTest, MixedLayoutTwoRanks) {
  const std::string full = testing::MakeTestDataset("ms_mixed_full", SmallDataset());
  const std::vector<std::string> roots = SplitIntoShards(full, 2, "ms_mixed");
  StartServers({roots[0], roots[1], roots[0]});
  ASSERT_EQ(set_->manifest().layout(), DatasetLayout::kMixed);
  CheckTwoRanksMatchOne(PlannerKind::kNoOff, "mixed");
}

TEST_F(MultiServerTest, ReplicaLostMidEpochItsSamplesGoToTheOthersExactlyOnce) {
  const std::string full = testing::MakeTestDataset("ms_failover", SmallDataset());
  auto gate = std::make_shared<absl::Notification>();
  auto held = std::make_shared<std::atomic<int>>(0);
  // Server 1 holds its samples at the gate until it is shut down.
  StartServers({full, full, full},
               {nullptr,
                [gate, held](uint64_t) {
                  ++*held;
                  gate->WaitForNotification();
                }},
               /*connect_timeout=*/absl::Seconds(1));
  FixedPolicy policy(Stage::kFlipped, "resizeoff");
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(set_.get(), Options(4, 0, 1), &policy);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  // Server 1 owes samples when it goes (they move to the others at once).
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (*held == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  if (*held == 0) {
    gate->Notify();
    FAIL() << "server 1 was sent no sample";
  }
  std::thread stopper([this] { servers_[1]->Shutdown(absl::ZeroDuration()); });
  while ((*loader)->stats().servers[1].stream_breaks == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  gate->Notify();
  stopper.join();
  servers_[1].reset();
  std::multiset<uint64_t> ids;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ids.insert(b.ids.begin(), b.ids.end());
  }
  const LoaderEpochStats stats = (*loader)->stats();
  EXPECT_EQ(ids.size(), 27u);
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 27u);
  EXPECT_TRUE(stats.servers[1].lost);
  EXPECT_GT(stats.servers[1].failed_over, 0u);
  EXPECT_EQ(stats.servers[0].samples + stats.servers[1].samples + stats.servers[2].samples, 27u);
  // The next epoch goes on with the two that are left.
  ASSERT_TRUE((*loader)->StartEpoch(1).ok());
  int64_t n = 0;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    n += b.n;
  }
  EXPECT_EQ(n, 27);
  EXPECT_EQ((*loader)->stats().servers[1].samples, 0u);
}

TEST_F(MultiServerTest, ShardLostMidEpochEndsTheEpochNamingTheServerAndWhatIsMissing) {
  const std::string full = testing::MakeTestDataset("ms_shard_lost_full", SmallDataset());
  const std::vector<std::string> roots = SplitIntoShards(full, 3, "ms_shard_lost");
  auto gate = std::make_shared<absl::Notification>();
  StartServers(roots, {nullptr, nullptr, [gate](uint64_t) { gate->WaitForNotification(); }},
               absl::Seconds(1));
  const std::string victim = set_->address(2);
  FixedPolicy policy(Stage::kRaw, "nooff");
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(set_.get(), Options(4, 0, 1), &policy);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::thread stopper([this] { servers_[2]->Shutdown(absl::ZeroDuration()); });
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while ((*loader)->stats().servers[2].stream_breaks == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  gate->Notify();
  stopper.join();
  servers_[2].reset();
  absl::Status status;
  while (status.ok()) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    if (!more.ok()) status = more.status();
    if (more.ok() && !*more) break;
  }
  ASSERT_FALSE(status.ok()) << "the epoch completed without the shard";
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find(victim), std::string::npos) << status;
  EXPECT_NE(status.message().find("missing"), std::string::npos) << status;
}

TEST_F(MultiServerTest, ResumingAtTheCursorWithAnotherWorldSizeSeesEverySampleOnce) {
  const std::string full = testing::MakeTestDataset("ms_resume_full", SmallDataset());
  const std::vector<std::string> roots = SplitIntoShards(full, 3, "ms_resume");
  StartServers(roots);
  const uint64_t n = set_->manifest().num_samples();
  // 2 ranks x 3 for two steps, then 1 rank x 6 from the cursor; and 1 -> 2.
  for (const auto& [before, after] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}}) {
    std::multiset<uint64_t> seen;
    int64_t cursor = -1;
    for (int r = 0; r < before; ++r) {
      absl::StatusOr<RankEpoch> e =
          RunRank(PlannerKind::kNoOff, Options(6 / before, r, before), 0, 0, /*max_batches=*/2);
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_EQ(e->batches.size(), 2u);
      for (const Batch& b : e->batches) seen.insert(b.ids.begin(), b.ids.end());
      if (cursor >= 0) EXPECT_EQ(e->batches.back().cursor, cursor);
      cursor = e->batches.back().cursor;
    }
    EXPECT_EQ(cursor, 12);
    int64_t padding = 0;
    for (int r = 0; r < after; ++r) {
      absl::StatusOr<RankEpoch> e =
          RunRank(PlannerKind::kNoOff, Options(6 / after, r, after), 0, cursor);
      ASSERT_TRUE(e.ok()) << e.status();
      for (const Batch& b : e->batches) seen.insert(b.ids.begin(), b.ids.end());
      padding = e->stats.padding;
    }
    EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), n) << before << "->" << after;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), static_cast<int64_t>(n) + padding)
        << before << "->" << after << " (padding " << padding << ")";
  }
}

TEST_F(MultiServerTest, AStartPositionPastTheEpochsEndIsRefusedNotAnEmptyEpoch) {
  const std::string full = testing::MakeTestDataset("ms_past_end", SmallDataset());
  StartServers({full});
  const int64_t n = static_cast<int64_t>(set_->manifest().num_samples());
  // The end itself is an epoch already finished: no batches.
  absl::StatusOr<RankEpoch> at_end = RunRank(PlannerKind::kNoOff, Options(4, 0, 1), 0, n);
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_TRUE(at_end->batches.empty());
  absl::StatusOr<RankEpoch> past = RunRank(PlannerKind::kNoOff, Options(4, 0, 1), 0, n + 1);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument) << past.status();
  EXPECT_NE(past.status().message().find("past the end of the epoch"), std::string::npos)
      << past.status();
}

TEST_F(MultiServerTest, SmartoffPlansEveryServersSamplesAndMatchesNoOffByteForByte) {
  const std::string full = testing::MakeTestDataset("ms_smartoff_full", SmallDataset());
  const std::vector<std::string> roots = SplitIntoShards(full, 2, "ms_smartoff");
  StartServers({roots[0], roots[1], roots[1]});  // mixed: shard 1 has two replicas
  LoaderOptions options = Options(6, 0, 1);
  SmartoffOptions smart;
  smart.planner = PlannerKind::kOptimal;
  smart.profile_folder = testing::MakeTempDir("ms_smartoff_profile");
  // A profile with known times (not measured on a busy test machine): 10 ms
  // to decode here, on 2 local CPUs against 2 on each of 3 servers and a fast
  // link, so the planner offloads most decodes and keeps some.
  DatasetProfile profile;
  profile.dataset = set_->manifest().name();
  profile.fingerprint = set_->manifest().fingerprint();
  profile.crop_size = options.pipeline.augment.crop_size;
  profile.stages = testing::StagesWithoutJpegCrop();
  for (uint64_t id = 0; id < set_->manifest().num_samples(); ++id) {
    SampleProfile& p = profile.samples.emplace_back();
    p.id = id;
    p.bytes[kFirstStage] = set_->manifest().raw_size(id);
    p.bytes[Stage::kJpegCrop] = p.bytes[kFirstStage];
    SetSizedStageBytes(profile.crop_size, &p);
    p.client = testing::MakeOpTimes(0.01, 1e-4, 1e-4);
  }
  ASSERT_TRUE(SaveProfileFolder(profile, smart.profile_folder).ok());
  smart.net_bw_mbit = 10000;
  smart.remote_cpus = 2;
  smart.gpu_batch_seconds = 0;
  absl::StatusOr<std::unique_ptr<ClusterSmartoffPolicy>> policy =
      CreateClusterSmartoffPolicy(set_.get(), options, smart, /*ingress_mbit=*/0);
  ASSERT_TRUE(policy.ok()) << policy.status();
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(set_.get(), options, policy->get());
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::vector<Batch> batches;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    batches.push_back(std::move(b));
  }
  const LoaderEpochStats stats = (*loader)->stats();
  EXPECT_EQ(stats.samples, 27u);
  EXPECT_GT((*policy)->PredictedEpochSeconds(), 0);
  const ClusterPlanResult plan = (*policy)->last_plan();
  ASSERT_EQ(plan.cost.servers.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_GT(plan.cost.servers[s].samples, 0) << "server " << s;
    EXPECT_EQ(static_cast<int64_t>(stats.servers[s].samples), plan.cost.servers[s].samples)
        << "server " << s << " did not serve what the plan gave it";
  }
  // Samples went out at more than one stage, and whatever the stage and the
  // server the pixels are those of nooff.
  int stages_used = 0;
  for (uint64_t n : stats.samples_by_stage) stages_used += n > 0;
  EXPECT_GT(stages_used, 1);
  absl::StatusOr<RankEpoch> nooff = RunRank(PlannerKind::kNoOff, options);
  ASSERT_TRUE(nooff.ok());
  const auto a = ImagesById(nooff->batches);
  for (const auto& [id, pixels] : ImagesById(batches)) {
    EXPECT_TRUE(pixels == a.at(id)) << "sample " << id;
  }
}

}  // namespace
}  // namespace sophon
