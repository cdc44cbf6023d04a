// The sophon-server program as operators run it (SOPHON_SERVER_BIN, with
// LibTorch linked in when built with SOPHON_BACKBONE), not the library in a
// test binary: --metrics-port scraped over HTTP on loopback, and TLS with a
// bearer token through the project's own client.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/loader/sample_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/net/wire.h"
#include "sophon/ops/stage.h"
#include "tests/server/scrape.h"
#include "tests/server/server_process.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::sophon::testing::ScrapeMetrics;
using ::sophon::testing::SeriesValue;
using ::sophon::testing::ServerProcess;
using ::testing::HasSubstr;

constexpr int kSamples = 6;

class ServerProgramTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TestDatasetOptions dataset;
    dataset.classes = 2;
    dataset.per_class = kSamples / 2;
    dataset.min_side = 64;
    dataset.max_side = 96;
    data_dir_ = new std::string(testing::MakeTestDataset("server_program", dataset));
  }

  static std::vector<std::string> BaseFlags() {
    return {"--data=" + *data_dir_, "--host=127.0.0.1", "--port=0", "--prep-workers=1",
            "--stats-interval=0", "--log-level=warn"};
  }

  static absl::StatusOr<std::unique_ptr<SampleClient>> Connect(
      const std::string& address, const CredentialsOptions& credentials,
      absl::Duration timeout = absl::Seconds(30)) {
    ClientOptions options;
    options.address = address;
    options.credentials = credentials;
    options.connect_timeout = timeout;
    return SampleClient::Connect(options);
  }

  // Fetches every sample RAW through one stream; the number received.
  static absl::StatusOr<int> FetchAll(SampleClient* client) {
    FetchRequestBuilder builder(/*epoch=*/0, /*seed=*/1, AugmentOptions());
    for (uint64_t id = 0; id < kSamples; ++id) builder.Add(id, Stage::kRaw);
    std::unique_ptr<FetchCall> call = client->OpenFetch();
    if (!call->Write(builder.Take()) || !call->WritesDone()) return call->Finish();
    int received = 0;
    v1::FetchResponse response;
    while (call->Read(&response)) {
      for (const v1::Sample& sample : response.samples()) {
        if (absl::Status s = SampleStatus(sample); !s.ok()) return s;
        ++received;
      }
    }
    if (absl::Status s = call->Finish(); !s.ok()) return s;
    return received;
  }

  static std::string* data_dir_;
};

std::string* ServerProgramTest::data_dir_ = nullptr;

TEST_F(ServerProgramTest, MetricsPortServesTheServersMetricFamiliesOverHttp) {
  ServerProcess server(SOPHON_SERVER_BIN);
  std::vector<std::string> flags = BaseFlags();
  flags.push_back("--metrics-port=0");
  absl::Status started = server.Start(flags, /*metrics=*/true);
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_GT(server.metrics_port(), 0);

  // Samples served show in the counters.
  absl::StatusOr<std::unique_ptr<SampleClient>> client =
      Connect(server.address(), CredentialsOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<int> received = FetchAll(client->get());
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(*received, kSamples);

  absl::StatusOr<std::string> body = ScrapeMetrics(server.metrics_port());
  ASSERT_TRUE(body.ok()) << body.status() << "\nserver stderr:\n" << server.Stderr();
  EXPECT_THAT(*body, HasSubstr("# TYPE sophon_server_samples_total counter\n"));
  absl::StatusOr<double> raw = SeriesValue(*body, "sophon_server_samples_total{stage=\"raw\"}");
  ASSERT_TRUE(raw.ok()) << raw.status() << "\n" << *body;
  EXPECT_EQ(*raw, kSamples);
  absl::StatusOr<double> streams = SeriesValue(*body, "sophon_server_streams_opened_total");
  ASSERT_TRUE(streams.ok()) << streams.status();
  EXPECT_GE(*streams, 1);
  absl::StatusOr<double> workers = SeriesValue(*body, "sophon_server_prep_workers");
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(*workers, 1);
  for (const char* process : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                              "process_threads", "process_open_fds"}) {
    absl::StatusOr<double> value = SeriesValue(*body, process);
    ASSERT_TRUE(value.ok()) << value.status() << "\n" << *body;
    EXPECT_GT(*value, 0) << process;
  }
  // A second scrape works too (the endpoint keeps serving).
  EXPECT_TRUE(ScrapeMetrics(server.metrics_port()).ok());
}

TEST_F(ServerProgramTest, TlsWithATokenServesTheRightClientOnlyAndMetricsStayOn) {
  const std::string dir = testing::MakeTempDir("server_program_certs");
  absl::StatusOr<testing::TestCertificates> certs = testing::MakeTestCertificates(dir);
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string token_file = dir + "/token";
  testing::WriteFile(token_file, "program-test-token\n");
  const std::string wrong_token_file = dir + "/wrong-token";
  testing::WriteFile(wrong_token_file, "not-the-token");

  ServerProcess server(SOPHON_SERVER_BIN);
  std::vector<std::string> flags = BaseFlags();
  flags.push_back("--tls-cert=" + certs->server_cert);
  flags.push_back("--tls-key=" + certs->server_key);
  flags.push_back("--auth-token-file=" + token_file);
  flags.push_back("--metrics-port=0");
  absl::Status started = server.Start(flags, /*metrics=*/true);
  ASSERT_TRUE(started.ok()) << started;

  CredentialsOptions tls;
  tls.kind = "tls";
  tls.tls_ca = certs->ca;
  // The right CA and token: the manifest and every sample.
  CredentialsOptions good = tls;
  good.auth_token_file = token_file;
  absl::StatusOr<std::unique_ptr<SampleClient>> client = Connect(server.address(), good);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->manifest().num_samples(), static_cast<uint32_t>(kSamples));
  absl::StatusOr<int> received = FetchAll(client->get());
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(*received, kSamples);

  // TLS without a token, and with another token: refused, UNAUTHENTICATED.
  absl::StatusOr<std::unique_ptr<SampleClient>> none = Connect(server.address(), tls);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  CredentialsOptions wrong = tls;
  wrong.auth_token_file = wrong_token_file;
  absl::StatusOr<std::unique_ptr<SampleClient>> bad = Connect(server.address(), wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnauthenticated) << bad.status();
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("not-the-token")));
  // Plaintext to a TLS server gets nothing (gRPC reports it UNAVAILABLE).
  absl::StatusOr<std::unique_ptr<SampleClient>> plain =
      Connect(server.address(), CredentialsOptions(), absl::Seconds(1));
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable) << plain.status();

  // The good client is still served, and the refusals did not count as samples.
  received = FetchAll(client->get());
  ASSERT_TRUE(received.ok()) << received.status();
  absl::StatusOr<std::string> body = ScrapeMetrics(server.metrics_port());
  ASSERT_TRUE(body.ok()) << body.status() << "\nserver stderr:\n" << server.Stderr();
  absl::StatusOr<double> raw = SeriesValue(*body, "sophon_server_samples_total{stage=\"raw\"}");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, 2 * kSamples);
}

TEST_F(ServerProgramTest, AMetricsPortInUseStopsTheProgramNamingTheAddress) {
  ServerProcess first(SOPHON_SERVER_BIN);
  std::vector<std::string> flags = BaseFlags();
  flags.push_back("--metrics-port=0");
  absl::Status started = first.Start(flags, /*metrics=*/true);
  ASSERT_TRUE(started.ok()) << started;

  ServerProcess second(SOPHON_SERVER_BIN);
  flags.back() = absl::StrCat("--metrics-port=", first.metrics_port());
  absl::Status refused = second.Start(flags, /*metrics=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("exited with code 1"));
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("127.0.0.1:", first.metrics_port(),
                                                       ": Address already in use")));
  EXPECT_TRUE(ScrapeMetrics(first.metrics_port()).ok());  // the first one serves on
}

}  // namespace
}  // namespace sophon
