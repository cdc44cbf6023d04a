// A replica that goes down (real gRPC on 127.0.0.1, port 0, real files): its
// samples move to the other replica at once, not after the client's
// connect_timeout (20 s here, so a wait for it cannot pass unseen), later
// epochs and the statistics calls do not wait for it, and once it is back on
// the same port an epoch's start finds it and uses it again; one that drains
// before it stops hands its samples over at once, and one that starts
// draining between epochs is sent no stream. Every epoch's
// batches are those of the same epoch with both replicas up: the same ids in
// the same order, byte for byte.
#include <atomic>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/loader/loader.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "spdlog/spdlog.h"
#include "tests/cluster/local_cluster.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr absl::Duration kConnectTimeout = absl::Seconds(20);
// Far below kConnectTimeout: an epoch that waited for the dead replica fails.
constexpr absl::Duration kEpochBound = absl::Seconds(5);

// Server 1's prep: while `on`, every sample waits for `gate`, so that the
// samples it owes when it is shut down are never sent.
struct Hold {
  std::atomic<bool> on{false};
  std::atomic<int> held{0};  // samples waiting at the gate
  absl::Notification gate;
};

struct EpochRun {
  std::vector<Batch> batches;
  LoaderEpochStats stats;
  absl::Duration wall;
};

class ReplicaDownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.classes = 3;
    d.per_class = 10;  // 30 samples, 8 batches of 4
    d.min_side = 40;
    d.max_side = 64;
    root_ = testing::MakeTestDataset("replica_down", d);
    hold_ = std::make_shared<Hold>();
    absl::StatusOr<testing::LocalCluster> cluster = testing::StartLocalCluster(
        {root_, root_}, {nullptr, [hold = hold_](uint64_t) {
                           if (!hold->on) return;
                           ++hold->held;
                           hold->gate.WaitForNotification();
                         }},
        kConnectTimeout);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    servers_ = std::move(cluster->servers);
    clients_ = std::move(cluster->clients);
    set_ = std::move(cluster->set);
    port1_ = servers_[1]->port();
    // The reference: each epoch with both replicas up.
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          Loader::Create(set_.get(), Options(), &policy_);
      ASSERT_TRUE(loader.ok()) << loader.status();
      absl::StatusOr<EpochRun> run = RunEpoch(loader->get(), epoch);
      ASSERT_TRUE(run.ok()) << run.status();
      spdlog::info("epoch {} with both replicas up: {}", epoch, absl::FormatDuration(run->wall));
      reference_.push_back(*std::move(run));
    }
  }

  static LoaderOptions Options() {
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 2;
    o.prefetch_batches = 2;
    o.seed = 11;
    o.pipeline.augment.crop_size = 32;
    return o;
  }

  static absl::StatusOr<EpochRun> RunEpoch(Loader* loader, uint64_t epoch) {
    const absl::Time start = absl::Now();
    if (absl::Status s = loader->StartEpoch(epoch); !s.ok()) return s;
    return Drain(loader, start);
  }

  static absl::StatusOr<EpochRun> Drain(Loader* loader, absl::Time start) {
    EpochRun run;
    while (true) {
      Batch b;
      absl::StatusOr<bool> more = loader->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) break;
      run.batches.push_back(std::move(b));
    }
    run.wall = absl::Now() - start;
    run.stats = loader->stats();
    return run;
  }

  // Every sample exactly once, in the reference's order, byte for byte.
  void ExpectSameAsReference(const EpochRun& run, uint64_t epoch) {
    const EpochRun& ref = reference_[epoch];
    ASSERT_EQ(run.batches.size(), ref.batches.size()) << "epoch " << epoch;
    std::multiset<uint64_t> ids;
    for (size_t k = 0; k < run.batches.size(); ++k) {
      const Batch& a = run.batches[k];
      const Batch& b = ref.batches[k];
      ids.insert(a.ids.begin(), a.ids.end());
      ASSERT_EQ(a.ids, b.ids) << "epoch " << epoch << " batch " << k;
      EXPECT_EQ(a.labels, b.labels) << "epoch " << epoch << " batch " << k;
      ASSERT_EQ(a.images.size(), b.images.size()) << "epoch " << epoch << " batch " << k;
      EXPECT_EQ(0, std::memcmp(a.images.data(), b.images.data(), a.images.size() * sizeof(float)))
          << "epoch " << epoch << " batch " << k;
    }
    EXPECT_EQ(ids.size(), 30u) << "epoch " << epoch;
    EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 30u) << "epoch " << epoch;
  }

  // Epoch 0 with server 1 shut down once its stream holds samples it owes;
  // checked against the reference. The loader goes on with the next epochs.
  void RunEpochZeroLosingServerOne(Loader* loader) {
    hold_->on = true;
    const absl::Time start = absl::Now();
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    // Server 1 owes samples when it goes.
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (hold_->held == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    if (hold_->held == 0) {
      hold_->gate.Notify();
      FAIL() << "server 1 was sent no sample";
    }
    // Shutdown waits for the held samples' calls: its own thread, and the
    // gate opens once the loader has seen the stream break.
    std::thread stopper([this] { servers_[1]->Shutdown(absl::ZeroDuration()); });
    while (loader->stats().servers[1].stream_breaks == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    hold_->gate.Notify();
    stopper.join();
    servers_[1].reset();
    absl::StatusOr<EpochRun> run = Drain(loader, start);
    ASSERT_TRUE(run.ok()) << run.status();
    spdlog::info("epoch 0, replica 1 shut down in it: {}", absl::FormatDuration(run->wall));
    EXPECT_LT(run->wall, kEpochBound) << "the epoch waited for the dead replica";
    EXPECT_TRUE(run->stats.servers[1].lost);
    EXPECT_GT(run->stats.servers[1].failed_over, 0u);
    EXPECT_EQ(run->stats.servers[0].samples + run->stats.servers[1].samples, 30u);
    ExpectSameAsReference(*run, 0);
  }

  void RestartServerOne() {
    StorageServerOptions options;
    options.data_dir = root_;
    options.host = "127.0.0.1";
    options.port = port1_;
    options.service.prep_workers = 2;
    options.stats_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    servers_[1] = *std::move(server);
  }

  std::string root_;
  std::shared_ptr<Hold> hold_;
  std::vector<std::unique_ptr<StorageServer>> servers_;
  std::vector<std::unique_ptr<SampleClient>> clients_;
  std::unique_ptr<ServerSet> set_;
  int port1_ = 0;
  FixedPolicy policy_{Stage::kFlipped, "resizeoff"};
  std::vector<EpochRun> reference_;
};

TEST_F(ReplicaDownTest, ADeadReplicaIsNotWaitedForInItsEpochLaterEpochsOrStatistics) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set_.get(), Options(), &policy_);
  ASSERT_TRUE(loader.ok()) << loader.status();
  RunEpochZeroLosingServerOne(loader->get());

  // Statistics between epochs: the dead replica is not waited for.
  absl::Time start = absl::Now();
  absl::StatusOr<v1::ServerStats> stats = clients_[1]->GetStats();
  const absl::Duration stats_wall = absl::Now() - start;
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable) << stats.status();
  EXPECT_NE(stats.status().message().find(set_->address(1)), std::string::npos) << stats.status();
  EXPECT_LT(stats_wall, absl::Seconds(1)) << stats.status();
  EXPECT_TRUE(clients_[1]->IsDown());
  EXPECT_TRUE(clients_[0]->GetStats().ok());

  for (uint64_t epoch = 1; epoch < 3; ++epoch) {
    absl::StatusOr<EpochRun> run = RunEpoch(loader->get(), epoch);
    ASSERT_TRUE(run.ok()) << run.status();
    spdlog::info("epoch {}, replica 1 down: {} (with it up: {})", epoch,
                 absl::FormatDuration(run->wall), absl::FormatDuration(reference_[epoch].wall));
    EXPECT_LT(run->wall, kEpochBound) << "epoch " << epoch << " waited for the dead replica";
    EXPECT_TRUE(run->stats.servers[1].lost);
    EXPECT_EQ(run->stats.servers[1].samples, 0u);
    EXPECT_EQ(run->stats.servers[0].samples, 30u);
    EXPECT_EQ(run->stats.stream_breaks, 0);
    ExpectSameAsReference(*run, epoch);
    start = absl::Now();
    EXPECT_FALSE(clients_[1]->GetStats().ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  }
}

// A rolling restart: the replica is back on its port between epochs, and the
// next epoch's start finds it and gives it its share again.
TEST_F(ReplicaDownTest, AReplicaRestartedOnItsPortIsUsedAgain) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set_.get(), Options(), &policy_);
  ASSERT_TRUE(loader.ok()) << loader.status();
  RunEpochZeroLosingServerOne(loader->get());
  ASSERT_FALSE(clients_[1]->GetStats().ok());
  RestartServerOne();
  absl::StatusOr<EpochRun> run = RunEpoch(loader->get(), 1);
  ASSERT_TRUE(run.ok()) << run.status();
  spdlog::info("epoch 1, replica 1 restarted before it: {}", absl::FormatDuration(run->wall));
  EXPECT_LT(run->wall, kEpochBound);
  EXPECT_FALSE(run->stats.servers[1].lost);
  EXPECT_GT(run->stats.servers[1].samples, 0u) << "the restarted replica was not used";
  EXPECT_EQ(run->stats.servers[0].samples + run->stats.servers[1].samples, 30u);
  ExpectSameAsReference(*run, 1);
  EXPECT_FALSE(clients_[1]->IsDown());
  absl::StatusOr<v1::ServerStats> stats = clients_[1]->GetStats();
  EXPECT_TRUE(stats.ok()) << stats.status();
}

// A replica that drains before it stops (SIGTERM in a rolling restart) ends
// its stream with the draining trailer and refuses new ones while it still
// answers other calls: its samples go to the other replica at once, and the
// epochs complete while it drains. (Epoch 0 may end before the drain reaches
// the loader; epoch 1 starts with the replica draining.)
TEST_F(ReplicaDownTest, ADrainingReplicaHandsItsSamplesToTheOtherAtOnce) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set_.get(), Options(), &policy_);
  ASSERT_TRUE(loader.ok()) << loader.status();
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const absl::Time start = absl::Now();
    ASSERT_TRUE((*loader)->StartEpoch(epoch).ok());
    EpochRun run;
    std::thread drainer;
    while (true) {
      // A stall (the loader waiting on the draining replica) ends the test.
      if (!(*loader)->WaitForNext(kEpochBound)) {
        ADD_FAILURE() << "epoch " << epoch << " stalled while replica 1 drains";
        (*loader)->Stop();
        break;
      }
      Batch b;
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      run.batches.push_back(std::move(b));
      // Replica 1 starts draining once the first batch has arrived.
      if (epoch == 0 && run.batches.size() == 1) {
        drainer = std::thread([this] { servers_[1]->Drain(); });
      }
    }
    if (drainer.joinable()) drainer.join();
    run.wall = absl::Now() - start;
    run.stats = (*loader)->stats();
    spdlog::info("epoch {}, replica 1 draining: {}", epoch, absl::FormatDuration(run.wall));
    EXPECT_LT(run.wall, kEpochBound);
    if (epoch == 1) {
      EXPECT_TRUE(run.stats.servers[1].lost);
      // Its health service says NOT_SERVING: the epoch's start does not take
      // it for back and opens no stream there (none refused for draining
      // beyond epoch 0's).
      EXPECT_EQ(run.stats.servers[1].samples, 0u);
      v1::ServerStats stats;
      ASSERT_TRUE(servers_[1]->service()->GetStats({}, &stats).ok());
      EXPECT_EQ(stats.rejections_by_limit().count("draining"), 0u)
          << stats.rejections_by_limit().at("draining") << " streams refused while draining";
    }
    EXPECT_EQ(run.stats.servers[0].samples + run.stats.servers[1].samples, 30u);
    ExpectSameAsReference(run, epoch);
  }
  servers_[1]->Shutdown();
}

// A replica that starts draining between two epochs (the loader has no
// stream there to learn it from): the next epoch's start asks its health
// service, opens no stream there, and the other replica serves the epoch.
TEST_F(ReplicaDownTest, AReplicaThatDrainsBetweenEpochsIsSentNoStream) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(set_.get(), Options(), &policy_);
  ASSERT_TRUE(loader.ok()) << loader.status();
  absl::StatusOr<EpochRun> run = RunEpoch(loader->get(), 0);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->stats.servers[1].lost);
  EXPECT_GT(run->stats.servers[1].samples, 0u);
  servers_[1]->Drain();
  run = RunEpoch(loader->get(), 1);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LT(run->wall, kEpochBound);
  EXPECT_TRUE(run->stats.servers[1].lost);
  EXPECT_EQ(run->stats.servers[1].samples, 0u);
  EXPECT_EQ(run->stats.servers[0].samples, 30u);
  EXPECT_EQ(run->stats.stream_breaks, 0);
  v1::ServerStats stats;
  ASSERT_TRUE(servers_[1]->service()->GetStats({}, &stats).ok());
  EXPECT_EQ(stats.rejections_by_limit().count("draining"), 0u)
      << stats.rejections_by_limit().at("draining") << " streams refused while draining";
  ExpectSameAsReference(*run, 1);
  servers_[1]->Shutdown();
}

}  // namespace
}  // namespace sophon
