// The server's counters of what its samples cost (ServerStats.sample_*_seconds):
// the sums of the figures every Sample carries, so that a client can tell its
// own samples' cost from the others'.
#include "server/server_stats.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "gtest/gtest.h"
#include "sophon/net/wire.h"
#include "server/storage_server.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(ServerStatsTest, SumsEachSamplesSeconds) {
  ServerStats stats;
  stats.RecordSampleSeconds(0.5, 0.25, 0.125);
  stats.RecordSampleSeconds(1.0, 0.75, 0.0);
  stats.RecordSampleSeconds(-1.0, -1.0, -1.0);  // a clock that went back counts nothing
  v1::ServerStats out;
  stats.Snapshot(&out);
  EXPECT_DOUBLE_EQ(out.sample_wall_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(out.sample_cpu_seconds(), 1.0);
  EXPECT_DOUBLE_EQ(out.sample_read_seconds(), 0.125);
}

TEST(ServerStatsTest, ServerReportsTheSumOfWhatItsSamplesCarry) {
  testing::TestDatasetOptions d;
  d.classes = 2;
  d.per_class = 3;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("server_stats", d);
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.service.prep_workers = 1;
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  auto stub = v1::SampleService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream =
      stub->Fetch(&context);
  AugmentOptions augment;
  augment.crop_size = 32;
  FetchRequestBuilder request(/*epoch=*/0, /*seed=*/1, augment);
  const int n = 6;
  for (int id = 0; id < n; ++id) request.Add(id, id % 2 == 0 ? Stage::kRaw : Stage::kCropped);
  ASSERT_TRUE(stream->Write(request.Take()));
  double wall = 0, cpu = 0, read = 0;
  int received = 0;
  v1::FetchResponse response;
  while (received < n && stream->Read(&response)) {
    for (const v1::Sample& sample : response.samples()) {
      EXPECT_EQ(sample.error_code(), 0) << sample.error_message();
      wall += sample.server_wall_seconds();
      cpu += sample.server_cpu_seconds();
      read += sample.server_read_seconds();
      ++received;
    }
  }
  ASSERT_EQ(received, n);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_GT(wall, 0);

  v1::ServerStats stats;
  ASSERT_TRUE((*server)->service()->GetStats({}, &stats).ok());
  // Each figure is counted in whole nanoseconds.
  EXPECT_NEAR(stats.sample_wall_seconds(), wall, n * 1e-9);
  EXPECT_NEAR(stats.sample_cpu_seconds(), cpu, n * 1e-9);
  EXPECT_NEAR(stats.sample_read_seconds(), read, n * 1e-9);
}

}  // namespace
}  // namespace sophon
