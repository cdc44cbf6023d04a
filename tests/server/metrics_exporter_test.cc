#include "server/metrics_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "sophon/net/wire.h"
#include "gtest/gtest.h"
#include "sophon/ops/stage.h"
#include "tests/server/scrape.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::sophon::testing::ScrapeMetrics;
using ::sophon::testing::SeriesValue;

v1::ServerStats FakeStats() {
  v1::ServerStats s;
  for (int i = 0; i < kNumStages; ++i) {  // indexed by wire value
    s.add_samples_by_stage(0);
    s.add_bytes_by_stage(0);
  }
  for (Stage stage : AllStages()) {
    s.set_samples_by_stage(StageToProto(stage), 10 + StageIndex(stage));
    s.set_bytes_by_stage(StageToProto(stage), 1000 * (1 + StageIndex(stage)));
  }
  (*s.mutable_declined_by_stage())["jpeg_crop"] = 6;
  s.set_samples_failed(7);
  (*s.mutable_failures_by_reason())["DATA_LOSS"] = 3;
  (*s.mutable_failures_by_reason())["odd \"name\"\\\nline"] = 2;  // 2 left as "unknown"
  s.set_prep_busy_seconds(12.5);
  s.set_prep_workers(4);
  s.set_queue_depth(9);
  s.set_active_streams(3);
  s.set_streams_opened(41);
  s.set_inflight_samples(17);
  s.set_inflight_bytes(123456789);
  s.set_inflight_budget_bytes(1073741824);
  s.set_peak_inflight_bytes(2048);
  s.set_budget_waiters(3);
  s.set_pending_request_bytes(4096);
  s.set_peak_stream_inflight(64);
  s.set_max_inflight_per_stream(128);
  s.set_requests_rejected(5);
  (*s.mutable_rejections_by_limit())["max_crop_size"] = 2;
  (*s.mutable_rejections_by_limit())["max_streams"] = 11;
  s.set_process_cpu_seconds(33.25);
  s.set_uptime_seconds(99.5);
  s.set_dataset_fingerprint(0xabcdef0123456789ull);
  s.set_cache_hits(301);
  s.set_cache_misses(302);
  s.set_cache_evictions(303);
  s.set_cache_bytes(304);
  s.set_cache_entries(305);
  s.set_cache_capacity_bytes(306);
  return s;
}

std::unique_ptr<MetricsExporter> StartExporter(StatsSnapshotFn fn) {
  MetricsOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(options, std::move(fn));
  EXPECT_TRUE(exporter.ok()) << exporter.status();
  if (!exporter.ok()) return nullptr;
  return *std::move(exporter);
}

TEST(MetricsExporterTest, ServesEveryStatWithNamesLabelsAndValues) {
  std::unique_ptr<MetricsExporter> exporter = StartExporter([] { return FakeStats(); });
  ASSERT_NE(exporter, nullptr);
  EXPECT_GT(exporter->port(), 0);
  EXPECT_EQ(exporter->address(), absl::StrCat("127.0.0.1:", exporter->port()));
  absl::StatusOr<std::string> body = ScrapeMetrics(exporter->port());
  ASSERT_TRUE(body.ok()) << body.status();

  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_samples_total counter\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_bytes_total counter\n"));
  for (Stage stage : AllStages()) {
    const int i = StageIndex(stage);
    EXPECT_THAT(*body, HasSubstr(absl::StrCat("sophon_server_samples_total{stage=\"",
                                              StageName(stage), "\"} ", 10 + i, "\n")));
    EXPECT_THAT(*body, HasSubstr(absl::StrCat("sophon_server_bytes_total{stage=\"",
                                              StageName(stage), "\"} ", 1000 * (1 + i), "\n")));
  }
  // Files sent whole when asked for a lossless crop, by the stage asked for.
  EXPECT_THAT(*body,
              HasSubstr("sophon_server_samples_declined_total{stage=\"jpeg_crop\"} 6\n"));
  // Map entries, the remainder of the total as "unknown", and an escaped label value.
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_sample_failures_total counter\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_sample_failures_total{reason=\"DATA_LOSS\"} 3\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_sample_failures_total{reason=\"unknown\"} 2\n"));
  EXPECT_THAT(*body, HasSubstr(
      "sophon_server_sample_failures_total{reason=\"odd \\\"name\\\"\\\\\\nline\"} 2\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_rejections_total{limit=\"max_crop_size\"} 2\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_rejections_total{limit=\"max_streams\"} 11\n"));
  EXPECT_THAT(*body, Not(HasSubstr("sophon_server_rejections_total{limit=\"unknown\"}")));
  EXPECT_THAT(*body, HasSubstr("sophon_server_requests_rejected_total 5\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_streams_opened_total 41\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_prep_busy_seconds_total counter\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_prep_busy_seconds_total 12.5\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_prep_workers gauge\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_prep_workers 4\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_queue_depth 9\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_active_streams gauge\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_active_streams 3\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_inflight_samples 17\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_inflight_bytes 123456789\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_inflight_budget_bytes 1073741824\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_inflight_peak_bytes 2048\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_budget_waiters 3\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_pending_request_bytes 4096\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_stream_inflight_peak_samples 64\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_stream_inflight_limit_samples 128\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_uptime_seconds 99.5\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_cache_hits_total counter\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_hits_total 301\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_misses_total 302\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_evictions_total 303\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_cache_bytes gauge\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_bytes 304\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_entries 305\n"));
  EXPECT_THAT(*body, HasSubstr("sophon_server_cache_capacity_bytes 306\n"));
  EXPECT_THAT(*body,
              HasSubstr("sophon_server_dataset_info{fingerprint=\"abcdef0123456789\"} 1\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(*body, HasSubstr("process_cpu_seconds_total 33.25\n"));
  // Read from /proc at scrape time: present, values not fixed.
  EXPECT_THAT(*body, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE process_threads gauge\n"));
  EXPECT_THAT(*body, HasSubstr("# TYPE process_open_fds gauge\n"));
  absl::StatusOr<double> threads = SeriesValue(*body, "process_threads");
  ASSERT_TRUE(threads.ok()) << threads.status();
  EXPECT_GE(*threads, 2);  // main + the exporter's HTTP thread
  absl::StatusOr<double> rss = SeriesValue(*body, "process_resident_memory_bytes");
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 1 << 20);
}

TEST(MetricsExporterTest, TakesAFreshSnapshotAtEveryScrape) {
  std::atomic<int> calls{0};
  std::unique_ptr<MetricsExporter> exporter = StartExporter([&] {
    v1::ServerStats s;
    s.add_samples_by_stage(++calls);
    return s;
  });
  ASSERT_NE(exporter, nullptr);
  const std::string first = absl::StrCat("sophon_server_samples_total{stage=\"",
                                         StageName(AllStages()[0]), "\"} ");
  absl::StatusOr<std::string> a = ScrapeMetrics(exporter->port());
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::string> b = ScrapeMetrics(exporter->port());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(calls.load(), 2);
  EXPECT_THAT(*a, HasSubstr(first + "1\n"));
  EXPECT_THAT(*b, HasSubstr(first + "2\n"));
  // Stages missing from the snapshot show as 0, not as absent series.
  EXPECT_THAT(*b, HasSubstr(absl::StrCat("sophon_server_samples_total{stage=\"",
                                         StageName(AllStages().back()), "\"} 0\n")));
}

TEST(MetricsExporterTest, AFailedSnapshotLeavesTheServerSeriesOutButServesTheProcess) {
  std::unique_ptr<MetricsExporter> exporter = StartExporter(
      []() -> absl::StatusOr<v1::ServerStats> { return absl::UnavailableError("shutting down"); });
  ASSERT_NE(exporter, nullptr);
  absl::StatusOr<std::string> body = ScrapeMetrics(exporter->port());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, Not(HasSubstr("sophon_server_")));
  EXPECT_THAT(*body, HasSubstr("process_threads "));
}

TEST(MetricsExporterTest, APortInUseIsAClearErrorNamingTheAddress) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  MetricsOptions options;
  options.port = port;
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(options, [] { return FakeStats(); });
  close(fd);
  ASSERT_FALSE(exporter.ok());
  EXPECT_EQ(exporter.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(exporter.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(exporter.status().message(), HasSubstr("in use"));
}

TEST(MetricsExporterTest, OptionsAreValidatedAndNamed) {
  MetricsOptions options;
  EXPECT_TRUE(options.Validate().ok());  // off by default
  EXPECT_FALSE(options.enabled());
  absl::StatusOr<std::unique_ptr<MetricsExporter>> off =
      MetricsExporter::Start(options, [] { return FakeStats(); });
  ASSERT_FALSE(off.ok());
  EXPECT_THAT(off.status().message(), HasSubstr("MetricsOptions.port"));
  options.port = 70000;
  EXPECT_THAT(options.Validate().message(), HasSubstr("MetricsOptions.port"));
  options.port = -2;
  EXPECT_THAT(options.Validate().message(), HasSubstr("MetricsOptions.port"));
  options.port = 0;
  options.host = "";
  EXPECT_THAT(options.Validate().message(), HasSubstr("MetricsOptions.host"));
  options.host = "127.0.0.1:80,0.0.0.0";  // two addresses
  EXPECT_THAT(options.Validate().message(), HasSubstr("MetricsOptions.host must be one address"));
  options.host = "not-an-address";
  absl::StatusOr<std::unique_ptr<MetricsExporter>> bad =
      MetricsExporter::Start(options, [] { return FakeStats(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("not-an-address:0"));
}

}  // namespace
}  // namespace sophon
