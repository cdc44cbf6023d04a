// A job assembled from a JobSpec against a real StorageServer on loopback
// port 0: the steps in order, a whole epoch through its loader, and the
// errors of steps out of order or of a spec that cannot run.
#include "client/job/job.h"

#include <memory>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/data/batch.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr int kSamples = 8;

class JobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dataset;
    dataset.classes = 2;
    dataset.per_class = kSamples / 2;
    dataset.min_side = 40;
    dataset.max_side = 56;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("job", dataset);
    options.host = "127.0.0.1";
    options.port = 0;
    options.service.prep_workers = 1;
    options.stats_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  JobSpec Spec() const {
    JobSpec spec;
    spec.servers.addresses = {server_->address()};
    spec.servers.connect_timeout = absl::Seconds(5);
    spec.loader.batch_size = 3;
    spec.loader.workers = 1;
    spec.loader.pipeline.augment.crop_size = 24;
    return spec;
  }

  // Every sample of epoch `epoch` through the job's loader: the ids seen.
  static std::multiset<uint64_t> OneEpoch(Job* job, uint64_t epoch) {
    std::multiset<uint64_t> ids;
    EXPECT_TRUE(job->loader()->StartEpoch(epoch).ok());
    Batch batch;
    while (true) {
      absl::StatusOr<bool> more = job->loader()->Next(&batch);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      for (int i = 0; i < batch.n; ++i) ids.insert(batch.ids[i]);
    }
    return ids;
  }

  std::unique_ptr<StorageServer> server_;
};

TEST_F(JobTest, AssembledJobLoadsEverySampleOncePerEpoch) {
  JobSpec spec = Spec();
  spec.mode = PlannerKind::kResizeOff;
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Assemble(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)->servers()->manifest().num_samples(), static_cast<uint64_t>(kSamples));
  EXPECT_EQ((*job)->policy()->name(), "resizeoff");
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const std::multiset<uint64_t> ids = OneEpoch(job->get(), epoch);
    EXPECT_EQ(ids.size(), static_cast<size_t>(kSamples));
    EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), static_cast<size_t>(kSamples));
  }
}

TEST_F(JobTest, StepsRunInOrderAndTheSpecMayChangeBetweenThem) {
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Connect(Spec());
  ASSERT_TRUE(job.ok()) << job.status();
  Job& j = **job;
  EXPECT_EQ(j.policy(), nullptr);
  EXPECT_EQ(j.Start().code(), absl::StatusCode::kFailedPrecondition);  // no plan yet
  j.spec().mode = PlannerKind::kAllOff;  // chosen once the servers are known
  ASSERT_TRUE(j.Plan().ok());
  EXPECT_EQ(j.Plan().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(j.policy()->name(), "alloff");
  ASSERT_TRUE(j.Start().ok());
  EXPECT_EQ(j.Start().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OneEpoch(&j, 0).size(), static_cast<size_t>(kSamples));
}

TEST_F(JobTest, TheSampleCacheIsOpenedAndGivenToTheLoader) {
  JobSpec spec = Spec();
  spec.cache.memory_bytes = 50'000'000;
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Assemble(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_NE((*job)->spec().loader.sample_cache, nullptr);
  OneEpoch(job->get(), 0);
  // nooff fetched every file whole: the cache holds them all.
  EXPECT_EQ((*job)->loader()->stats().sample_cache_entries, kSamples);
}

TEST_F(JobTest, ABadSpecIsRefusedBeforeAnyServerIsReached) {
  JobSpec spec = Spec();
  spec.servers.addresses = {"127.0.0.1:1"};  // nothing listens there
  spec.servers.connect_timeout = absl::Seconds(30);
  spec.servers.credentials.tls_key = "/key.pem";  // without its certificate
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Connect(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("CredentialsOptions.tls_key"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));  // not retried for the 30 s
}

TEST_F(JobTest, AServerThatDecodesOtherwiseIsRefusedByAddress) {
  JobSpec spec = Spec();
  spec.loader.pipeline.limits.lenient = true;  // the server is strict
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Connect(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr(server_->address()));
}

}  // namespace
}  // namespace sophon
