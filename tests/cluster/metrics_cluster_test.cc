// A real sophon-server with its Prometheus endpoint on port 0: the counters a
// scrape reads move with the samples a real client fetches.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "client/loader/sample_client.h"
#include "server/storage_server.h"
#include "sophon/net/wire.h"
#include "sophon/ops/augment.h"
#include "tests/server/scrape.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

double Series(const std::string& body, const std::string& series) {
  absl::StatusOr<double> value = testing::SeriesValue(body, series);
  EXPECT_TRUE(value.ok()) << value.status() << " in\n" << body;
  return value.ok() ? *value : -1;
}

TEST(MetricsClusterTest, ScrapesFollowTheSamplesAClientFetches) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 1;
  dopts.per_class = 5;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("metrics_cluster", dopts);
  options.port = 0;
  options.service.prep_workers = 2;
  options.stats_interval = absl::ZeroDuration();
  options.metrics.port = 0;
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->metrics_port(), 0);
  ASSERT_NE((*server)->metrics_port(), (*server)->port());

  absl::StatusOr<std::string> before = testing::ScrapeMetrics((*server)->metrics_port());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(Series(*before, "sophon_server_samples_total{stage=\"raw\"}"), 0);
  EXPECT_EQ(Series(*before, "sophon_server_samples_total{stage=\"cropped\"}"), 0);
  EXPECT_EQ(Series(*before, "sophon_server_prep_workers"), 2);

  ClientOptions copts;
  copts.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  ASSERT_TRUE(client.ok()) << client.status();
  AugmentOptions augment;
  augment.crop_size = 32;
  FetchRequestBuilder builder(/*epoch=*/0, /*seed=*/1, augment);
  for (uint64_t id = 0; id < 3; ++id) builder.Add(id, Stage::kRaw);
  for (uint64_t id = 3; id < 5; ++id) builder.Add(id, Stage::kCropped);
  std::unique_ptr<FetchCall> call = (*client)->OpenFetch();
  ASSERT_TRUE(call->Write(builder.Take()));
  call->WritesDone();
  int received = 0;
  uint64_t raw_bytes = 0;
  v1::FetchResponse response;
  while (call->Read(&response)) {
    for (const v1::Sample& sample : response.samples()) {
      ++received;
      if (sample.stage() == v1::STAGE_RAW) raw_bytes += sample.payload().size();
    }
  }
  ASSERT_TRUE(call->Finish().ok());
  ASSERT_EQ(received, 5);

  absl::StatusOr<std::string> after = testing::ScrapeMetrics((*server)->metrics_port());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Series(*after, "sophon_server_samples_total{stage=\"raw\"}"), 3);
  EXPECT_EQ(Series(*after, "sophon_server_samples_total{stage=\"cropped\"}"), 2);
  EXPECT_EQ(Series(*after, "sophon_server_bytes_total{stage=\"raw\"}"), raw_bytes);
  EXPECT_EQ(Series(*after, "sophon_server_bytes_total{stage=\"cropped\"}"), 2 * 32 * 32 * 3);
  EXPECT_GT(Series(*after, "sophon_server_prep_busy_seconds_total"), 0);
  EXPECT_GT(Series(*after, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Series(*after, "process_threads"), 0);
}

TEST(MetricsClusterTest, AMetricsPortInUseStopsTheServerFromStarting) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 1;
  dopts.per_class = 1;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("metrics_cluster_busy", dopts);
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.metrics.port = 0;
  absl::StatusOr<std::unique_ptr<StorageServer>> first = StorageServer::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.metrics.port = (*first)->metrics_port();
  absl::StatusOr<std::unique_ptr<StorageServer>> second = StorageServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(absl::StrCat("127.0.0.1:", options.metrics.port)),
            std::string::npos)
      << second.status();
  // The first keeps serving its metrics.
  EXPECT_TRUE(testing::ScrapeMetrics((*first)->metrics_port()).ok());
}

}  // namespace
}  // namespace sophon
