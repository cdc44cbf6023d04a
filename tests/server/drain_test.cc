// StorageServer::Drain and the standard health service on a real server on
// 127.0.0.1:0: what a rolling restart needs from the node being stopped.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/draining.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/health_check.h"
#include "sophon/net/wire.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr char kService[] = "sophon.v1.SampleService";

class DrainTest : public ::testing::Test {
 protected:
  void Start(ServiceOptions service, absl::Duration drain_timeout) {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 8;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("drain", d);
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    options.service = std::move(service);
    options.drain_timeout = drain_timeout;
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::SampleService::NewStub(channel_);
  }

  ServingStatus Health(const std::string& service) {
    absl::StatusOr<ServingStatus> s = CheckHealth(channel_, service, absl::Seconds(5));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : ServingStatus::kUnknown;
  }

  static v1::FetchRequest Request(int first, int n) {
    v1::FetchRequest request;
    AugmentOptions aug;
    aug.crop_size = 32;
    *request.mutable_augment() = ToProto(aug);
    for (int i = first; i < first + n; ++i) {
      v1::SampleRequest* s = request.add_samples();
      s->set_id(i);
      s->set_target_stage(StageToProto(Stage::kCropped));
    }
    return request;
  }

  static bool HasDrainingTrailer(const grpc::ClientContext& context) {
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find(kDrainingMetadataKey);
    return it != trailers.end() && std::string(it->second.data(), it->second.size()) == "1";
  }

  std::unique_ptr<StorageServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SampleService::Stub> stub_;
};

TEST_F(DrainTest, HealthIsServingForTheServerAndItsServiceAndUnknownForOthers) {
  Start(ServiceOptions(), absl::Seconds(1));
  EXPECT_EQ(Health(""), ServingStatus::kServing);
  EXPECT_EQ(Health(kService), ServingStatus::kServing);
  absl::StatusOr<ServingStatus> other = CheckHealth(channel_, "no.such.Service", absl::Seconds(5));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound) << other.status();
}

// Samples a stream has started are sent; those it had read but not started
// are handed back, and the stream ends UNAVAILABLE with the draining trailer.
TEST_F(DrainTest, StartedSamplesAreSentTheRestHandedBackAndNewStreamsRefused) {
  absl::Notification holding, release;
  std::atomic<int> prepared{0};
  ServiceOptions o;
  o.prep_workers = 2;
  o.max_inflight_per_stream = 2;  // of 6 ids read, 2 start and 4 wait
  o.before_prep = [&](uint64_t) {
    if (prepared.fetch_add(1) == 0) holding.Notify();
    release.WaitForNotification();
  };
  Start(o, absl::Seconds(30));
  // The prep workers wait on `release`: the server (and its workers) must be
  // gone before this test's notifications are.
  absl::Cleanup let_go = [&] {
    if (!release.HasBeenNotified()) release.Notify();
    server_.reset();
  };
  grpc::ClientContext a_context;
  auto a = stub_->Fetch(&a_context);
  ASSERT_TRUE(a->Write(Request(0, 6)));
  holding.WaitForNotification();

  absl::Notification drained;
  std::thread drainer([&] {
    server_->Drain();
    drained.Notify();
  });
  for (int i = 0; i < 500 && Health("") != ServingStatus::kNotServing; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Health(""), ServingStatus::kNotServing);
  EXPECT_EQ(Health(kService), ServingStatus::kNotServing);
  // A new stream is refused at once, and says why.
  grpc::ClientContext b_context;
  auto b = stub_->Fetch(&b_context);
  b->Write(Request(6, 1));
  v1::FetchResponse r;
  EXPECT_FALSE(b->Read(&r));
  const grpc::Status b_status = b->Finish();
  EXPECT_EQ(b_status.error_code(), grpc::StatusCode::UNAVAILABLE) << b_status.error_message();
  EXPECT_NE(b_status.error_message().find("draining"), std::string::npos);
  EXPECT_TRUE(HasDrainingTrailer(b_context));
  // Unary calls are still answered while draining.
  v1::ServerStats stats;
  grpc::ClientContext stats_context;
  EXPECT_TRUE(stub_->GetStats(&stats_context, v1::GetStatsRequest(), &stats).ok());
  EXPECT_FALSE(drained.HasBeenNotified()) << "two samples are still being prepared";

  release.Notify();
  int received = 0;
  while (a->Read(&r)) {
    for (const v1::Sample& s : r.samples()) {
      EXPECT_EQ(s.error_code(), 0) << s.error_message();
      EXPECT_LT(s.id(), 6u);
      ++received;
    }
  }
  const grpc::Status a_status = a->Finish();
  EXPECT_EQ(received, 2);
  EXPECT_EQ(a_status.error_code(), grpc::StatusCode::UNAVAILABLE) << a_status.error_message();
  EXPECT_NE(a_status.error_message().find("4 requested but not started were handed back"),
            std::string::npos)
      << a_status.error_message();
  EXPECT_TRUE(HasDrainingTrailer(a_context));
  EXPECT_TRUE(drained.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the drain returns once no stream is open, long before drain_timeout";
  drainer.join();
  EXPECT_EQ(prepared.load(), 2) << "nothing is started after the drain began";
}

TEST_F(DrainTest, ADrainThatRunsOutOfTimeEndsTheStreamsLeft) {
  absl::Notification holding, release;
  ServiceOptions o;
  o.prep_workers = 1;
  o.before_prep = [&](uint64_t) {
    holding.Notify();
    release.WaitForNotification();
  };
  Start(o, absl::Milliseconds(300));
  // The prep workers wait on `release`: the server (and its workers) must be
  // gone before this test's notifications are.
  absl::Cleanup let_go = [&] {
    if (!release.HasBeenNotified()) release.Notify();
    server_.reset();
  };
  grpc::ClientContext context;
  auto a = stub_->Fetch(&context);
  ASSERT_TRUE(a->Write(Request(0, 1)));
  holding.WaitForNotification();
  const absl::Time start = absl::Now();
  server_->Drain();
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  v1::FetchResponse r;
  EXPECT_FALSE(a->Read(&r));
  const grpc::Status status = a->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("drain_timeout"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(HasDrainingTrailer(context));
}

}  // namespace
}  // namespace sophon
