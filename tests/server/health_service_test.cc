// The server's own grpc.health.v1.Health (server/health_service.h) on a real
// server on 127.0.0.1:0: Watch answers the status now and each change (the
// drain's NOT_SERVING), a name the server does not know is SERVICE_UNKNOWN,
// and a server stopped with a Watch open does not wait for it. Check is
// covered by drain_test.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/sync_stream.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "server/unary_reactor.h"
#include "sophon/net/health_check.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr char kService[] = "sophon.v1.SampleService";

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 2;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("health_service", d);
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    options.drain_timeout = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  }

  // A Watch of `service`: HealthCheckRequest { service = 1 }.
  struct WatchCall {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader;
  };
  std::unique_ptr<WatchCall> Watch(const std::string& service) {
    auto call = std::make_unique<WatchCall>();
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    std::string bytes;
    if (!service.empty()) {
      bytes.push_back(0x0a);
      bytes.push_back(static_cast<char>(service.size()));
      bytes += service;
    }
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->reader.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
        channel_.get(),
        grpc::internal::RpcMethod("/grpc.health.v1.Health/Watch",
                                  grpc::internal::RpcMethod::SERVER_STREAMING),
        &call->context, request));
    return call;
  }

  // The next status a Watch answers; -1 when the call has ended.
  static int Next(WatchCall* call) {
    grpc::ByteBuffer response;
    if (!call->reader->Read(&response)) return -1;
    const std::string bytes = FlattenByteBuffer(response);
    if (bytes.size() != 2 || bytes[0] != 0x08) return -2;
    return bytes[1];
  }

  std::unique_ptr<StorageServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HealthServiceTest, WatchAnswersTheStatusAndEachChange) {
  std::unique_ptr<WatchCall> server_wide = Watch("");
  std::unique_ptr<WatchCall> service = Watch(kService);
  EXPECT_EQ(Next(server_wide.get()), static_cast<int>(ServingStatus::kServing));
  EXPECT_EQ(Next(service.get()), static_cast<int>(ServingStatus::kServing));
  server_->Drain();
  EXPECT_EQ(Next(server_wide.get()), static_cast<int>(ServingStatus::kNotServing));
  EXPECT_EQ(Next(service.get()), static_cast<int>(ServingStatus::kNotServing));
  server_wide->context.TryCancel();
  EXPECT_EQ(Next(server_wide.get()), -1);
  EXPECT_EQ(server_wide->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The other is still open when the server stops: it is ended, not waited for.
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(Next(service.get()), -1);
}

TEST_F(HealthServiceTest, AServiceTheServerDoesNotKnowIsServiceUnknown) {
  std::unique_ptr<WatchCall> other = Watch("no.such.Service");
  EXPECT_EQ(Next(other.get()), static_cast<int>(ServingStatus::kServiceUnknown));
  absl::StatusOr<ServingStatus> checked =
      CheckHealth(channel_, "no.such.Service", absl::Seconds(5));
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kNotFound) << checked.status();
  EXPECT_EQ(*CheckHealth(channel_, kService, absl::Seconds(5)), ServingStatus::kServing);
  other->context.TryCancel();
  EXPECT_EQ(Next(other.get()), -1);
  // The Watch calls counted as unary calls have all been let go.
  UnaryCalls& calls = server_->service()->unary_calls();
  for (int i = 0; i < 200 && calls.inflight() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(calls.inflight(), 0);
}

}  // namespace
}  // namespace sophon
