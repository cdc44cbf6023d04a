#include "sophon/net/credentials.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/v1/sophon.grpc.pb.h"

namespace sophon {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(CredentialsTest, InsecureIsTheDefaultKind) {
  EXPECT_EQ(CredentialsOptions().kind, "insecure");
  EXPECT_THAT(CredentialsKinds(), Contains("insecure"));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      CreateServerCredentials(CredentialsOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(*server, nullptr);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel =
      CreateChannelCredentials(CredentialsOptions());
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST(CredentialsTest, UnknownKindNamesItAndListsTheKnownOnes) {
  CredentialsOptions options;
  options.kind = "tls-mutual";
  for (const absl::Status& status : {CreateServerCredentials(options).status(),
                                     CreateChannelCredentials(options).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.kind 'tls-mutual'"));
    EXPECT_THAT(status.message(), HasSubstr("insecure"));
  }
}

// A new kind is one registration; its factories get the options.
TEST(CredentialsTest, RegisteredKindIsUsedByBothSides) {
  static std::atomic<int> server_calls{0};
  static std::atomic<int> channel_calls{0};
  CredentialsFactory factory;
  factory.server = [](const CredentialsOptions& options)
      -> absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> {
    EXPECT_EQ(options.kind, "test-counting");
    ++server_calls;
    return grpc::InsecureServerCredentials();
  };
  factory.channel = [](const CredentialsOptions& options)
      -> absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> {
    EXPECT_EQ(options.kind, "test-counting");
    ++channel_calls;
    return grpc::InsecureChannelCredentials();
  };
  ASSERT_TRUE(RegisterCredentialsKind("test-counting", factory).ok());
  EXPECT_THAT(CredentialsKinds(), Contains("test-counting"));
  CredentialsOptions options;
  options.kind = "test-counting";
  EXPECT_TRUE(CreateServerCredentials(options).ok());
  EXPECT_TRUE(CreateChannelCredentials(options).ok());
  EXPECT_EQ(server_calls.load(), 1);
  EXPECT_EQ(channel_calls.load(), 1);

  EXPECT_EQ(RegisterCredentialsKind("test-counting", factory).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterCredentialsKind("", factory).code(), absl::StatusCode::kInvalidArgument);
  CredentialsFactory half;
  half.server = factory.server;
  EXPECT_EQ(RegisterCredentialsKind("test-half", half).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CredentialsKinds(), ::testing::Not(Contains("test-half")));
}

TEST(CredentialsTest, FactoryErrorsReachTheCaller) {
  CredentialsFactory factory;
  factory.server = [](const CredentialsOptions&)
      -> absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> {
    return absl::NotFoundError("certificate file '/no/such/cert.pem' does not exist");
  };
  factory.channel = [](const CredentialsOptions&)
      -> absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> { return nullptr; };
  ASSERT_TRUE(RegisterCredentialsKind("test-failing", factory).ok());
  CredentialsOptions options;
  options.kind = "test-failing";
  const absl::Status server = CreateServerCredentials(options).status();
  EXPECT_EQ(server.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(server.message(), HasSubstr("/no/such/cert.pem"));
  // A factory that makes nothing is a bug in the factory, not a null to pass on.
  const absl::Status channel = CreateChannelCredentials(options).status();
  EXPECT_EQ(channel.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(channel.message(), HasSubstr("test-failing"));
}

// The two sides of the default kind talk to each other: a call reaches the
// server (whose methods are all unimplemented) and comes back.
TEST(CredentialsTest, InsecureServerAndChannelTalk) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      CreateServerCredentials(CredentialsOptions());
  ASSERT_TRUE(server_credentials.ok()) << server_credentials.status();
  v1::SampleService::Service unimplemented;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *server_credentials, &port);
  builder.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials =
      CreateChannelCredentials(CredentialsOptions());
  ASSERT_TRUE(channel_credentials.ok()) << channel_credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), *channel_credentials);
  std::unique_ptr<v1::SampleService::Stub> stub = v1::SampleService::NewStub(channel);
  grpc::ClientContext context;
  // A generous deadline: it bounds a hang, it does not time anything.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::ServerStats stats;
  EXPECT_EQ(stub->GetStats(&context, {}, &stats).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  server->Shutdown();
}

}  // namespace
}  // namespace sophon
