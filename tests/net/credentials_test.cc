#include "sophon/net/credentials.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/net/bearer_token.h"
#include "sophon/net/tls_credentials.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// A gRPC server on 127.0.0.1:0 with the credentials of `options` whose
// methods are all unimplemented: a call that reaches it comes back UNIMPLEMENTED.
struct UnimplementedServer {
  explicit UnimplementedServer(const CredentialsOptions& options) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        CreateServerCredentials(options);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    if (!credentials.ok()) return;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~UnimplementedServer() {
    if (server != nullptr) server->Shutdown();
  }
  bool ok() const { return server != nullptr && port != 0; }

  v1::SampleService::Service service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

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
  UnimplementedServer server{CredentialsOptions()};
  ASSERT_TRUE(server.ok());
  const int port = server.port;
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
}

TEST(CredentialsTest, TlsIsABuiltInKindAndTheDefaultWhenTlsFilesAreGiven) {
  EXPECT_THAT(CredentialsKinds(), Contains("tls"));
  CredentialsOptions options;
  EXPECT_EQ(DefaultCredentialsKind(options), "insecure");
  options.auth_token_file = "/token";  // a token alone does not make TLS
  EXPECT_EQ(DefaultCredentialsKind(options), "insecure");
  for (std::string CredentialsOptions::*field :
       {&CredentialsOptions::tls_cert, &CredentialsOptions::tls_key,
        &CredentialsOptions::tls_client_ca, &CredentialsOptions::tls_ca,
        &CredentialsOptions::tls_server_name}) {
    CredentialsOptions tls;
    tls.*field = "x";
    EXPECT_EQ(DefaultCredentialsKind(tls), "tls");
  }
}

TEST(CredentialsTest, ValidateNamesTheOption) {
  const auto expect_invalid = [](const CredentialsOptions& options, CredentialsSide side,
                                 const std::string& text) {
    const absl::Status status = options.Validate(side);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(status.message(), HasSubstr(text));
  };
  CredentialsOptions token;
  token.auth_token_file = "/token";
  // gRPC would abort if a token processor were attached to insecure credentials.
  expect_invalid(token, CredentialsSide::kServer, "CredentialsOptions.auth_token_file needs TLS");
  expect_invalid(token, CredentialsSide::kChannel, "CredentialsOptions.auth_token_file needs TLS");
  CredentialsOptions plaintext_ca;
  plaintext_ca.tls_ca = "/ca.pem";
  expect_invalid(plaintext_ca, CredentialsSide::kChannel,
                 "CredentialsOptions.tls_ca is set but the credentials kind is 'insecure'");

  CredentialsOptions server;
  server.kind = "tls";
  server.tls_key = "/key.pem";
  expect_invalid(server, CredentialsSide::kServer, "CredentialsOptions.tls_cert is required");
  server.tls_cert = "/cert.pem";
  server.tls_key.clear();
  expect_invalid(server, CredentialsSide::kServer, "CredentialsOptions.tls_key is required");
  server.tls_key = "/key.pem";
  EXPECT_TRUE(server.Validate(CredentialsSide::kServer).ok());
  server.tls_ca = "/ca.pem";
  expect_invalid(server, CredentialsSide::kServer, "CredentialsOptions.tls_ca applies to clients");

  CredentialsOptions channel;
  channel.kind = "tls";
  EXPECT_TRUE(channel.Validate(CredentialsSide::kChannel).ok());  // the system's roots
  channel.tls_key = "/key.pem";
  expect_invalid(channel, CredentialsSide::kChannel, "CredentialsOptions.tls_key is set without");
  channel.tls_key.clear();
  channel.tls_cert = "/cert.pem";
  expect_invalid(channel, CredentialsSide::kChannel, "CredentialsOptions.tls_cert is set without");
  channel.tls_cert.clear();
  channel.tls_client_ca = "/ca.pem";
  expect_invalid(channel, CredentialsSide::kChannel,
                 "CredentialsOptions.tls_client_ca applies to servers");
}

TEST(CredentialsTest, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]",
                           "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "", "10.0.0.1", "128.0.0.1", "example.org",
                           "localhost.example.org"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(CredentialsTest, DescriptionsNameFilesNeverTheToken) {
  const std::string dir = testing::MakeTempDir("credentials_describe");
  testing::WriteFile(dir + "/token", "very-secret-token");
  CredentialsOptions options;
  EXPECT_THAT(DescribeCredentials(options, CredentialsSide::kServer), HasSubstr("plaintext"));
  options.kind = "tls";
  options.tls_cert = "/etc/sophon/server.pem";
  options.tls_key = "/etc/sophon/server.key";
  options.tls_client_ca = "/etc/sophon/ca.pem";
  options.auth_token_file = dir + "/token";
  const std::string server = DescribeCredentials(options, CredentialsSide::kServer);
  EXPECT_THAT(server, HasSubstr("/etc/sophon/server.pem"));
  EXPECT_THAT(server, HasSubstr("client certificates required, signed by /etc/sophon/ca.pem"));
  EXPECT_THAT(server, HasSubstr("bearer token required"));
  EXPECT_THAT(server, ::testing::Not(HasSubstr("very-secret-token")));
  EXPECT_THAT(DescribeCredentials(options, CredentialsSide::kChannel),
              ::testing::Not(HasSubstr("very-secret-token")));
}

TEST(BearerTokenTest, TokenFileIsTrimmedAndChecked) {
  const std::string dir = testing::MakeTempDir("bearer_token");
  testing::WriteFile(dir + "/ok", "\n  abc.DEF-123_~+/=  \r\n");
  absl::StatusOr<std::string> token = ReadBearerToken("Opts.token", dir + "/ok");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc.DEF-123_~+/=");

  testing::WriteFile(dir + "/empty", " \n\t ");
  absl::Status status = ReadBearerToken("Opts.token", dir + "/empty").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("Opts.token"));
  EXPECT_THAT(status.message(), HasSubstr(dir + "/empty"));
  EXPECT_THAT(status.message(), HasSubstr("is empty"));

  testing::WriteFile(dir + "/two", "one two");
  status = ReadBearerToken("Opts.token", dir + "/two").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("without spaces"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("one two")));

  status = ReadBearerToken("Opts.token", dir + "/missing").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(dir + "/missing"));
  // A directory is not a token file.
  status = ReadBearerToken("Opts.token", dir).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("Opts.token: cannot read '"));
}

TEST(BearerTokenTest, TokenEquals) {
  EXPECT_TRUE(TokenEquals("abc", "abc"));
  EXPECT_FALSE(TokenEquals("abd", "abc"));
  EXPECT_FALSE(TokenEquals("ab", "abc"));
  EXPECT_FALSE(TokenEquals("abcabc", "abc"));  // cycles the secret: must still differ
  EXPECT_FALSE(TokenEquals("", "abc"));
  EXPECT_FALSE(TokenEquals("", ""));  // an empty secret never matches
}

class TlsCredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("tls_credentials"));
    absl::StatusOr<testing::TestCertificates> certs = testing::MakeTestCertificates(*dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new testing::TestCertificates(*certs);
  }
  static CredentialsOptions Server() {
    CredentialsOptions c;
    c.kind = "tls";
    c.tls_cert = certs_->server_cert;
    c.tls_key = certs_->server_key;
    return c;
  }
  static std::string* dir_;
  static testing::TestCertificates* certs_;
};
std::string* TlsCredentialsTest::dir_ = nullptr;
testing::TestCertificates* TlsCredentialsTest::certs_ = nullptr;

TEST_F(TlsCredentialsTest, FileErrorsNameTheOptionAndTheFile) {
  CredentialsOptions options = Server();
  options.tls_cert = *dir_ + "/missing.pem";
  absl::Status status = CreateServerCredentials(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_cert: cannot read '" + *dir_ +
                                          "/missing.pem'"));

  options = Server();
  options.tls_cert = certs_->server_key;  // a key where a certificate belongs
  status = CreateServerCredentials(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_cert"));
  EXPECT_THAT(status.message(), HasSubstr("CERTIFICATE"));

  options = Server();
  options.tls_key = certs_->client_key;  // another certificate's key
  status = CreateServerCredentials(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_key"));
  EXPECT_THAT(status.message(), HasSubstr("is not the private key of the certificate"));

  // A PEM header over garbage: OpenSSL's parse is the check, not the header.
  testing::WriteFile(*dir_ + "/bad.pem",
                     "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n");
  options = Server();
  options.tls_client_ca = *dir_ + "/bad.pem";
  status = CreateServerCredentials(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_client_ca"));
  EXPECT_THAT(status.message(), HasSubstr(*dir_ + "/bad.pem"));

  CredentialsOptions channel;
  channel.kind = "tls";
  channel.tls_ca = *dir_ + "/bad.pem";
  status = CreateChannelCredentials(channel).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_ca"));

  channel.tls_ca = certs_->ca;
  channel.auth_token_file = *dir_ + "/no-token";
  status = CreateChannelCredentials(channel).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.auth_token_file"));
}

// The two sides of "tls" talk through CreateChannel, including the server
// name override; a name the certificate does not carry fails.
TEST_F(TlsCredentialsTest, TlsServerAndChannelTalk) {
  UnimplementedServer server(Server());
  ASSERT_TRUE(server.ok());
  const int port = server.port;
  const auto call = [&](const std::string& name) {
    CredentialsOptions options;
    options.kind = "tls";
    options.tls_ca = certs_->ca;
    options.tls_server_name = name;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        CreateChannel(absl::StrCat("127.0.0.1:", port), options, grpc::ChannelArguments());
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return grpc::StatusCode::INTERNAL;
    std::unique_ptr<v1::SampleService::Stub> stub = v1::SampleService::NewStub(*channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ServerStats stats;
    return stub->GetStats(&context, {}, &stats).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(call("localhost"), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(call("other.example.org"), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace sophon
