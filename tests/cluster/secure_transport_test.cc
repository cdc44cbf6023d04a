// TLS, mutual TLS and bearer tokens end to end: a real StorageServer on
// 127.0.0.1 port 0 with certificates made at test time (tests/test_certs.h),
// and the real SampleClient. Every refusal is followed by a good client, to
// show the server keeps serving.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/loader/sample_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/wire.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr int kSamples = 6;

class SecureTransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TestDatasetOptions dataset;
    dataset.classes = 2;
    dataset.per_class = kSamples / 2;
    dataset.min_side = 64;
    dataset.max_side = 96;
    data_dir_ = new std::string(testing::MakeTestDataset("secure_transport", dataset));
    const std::string dir = testing::MakeTempDir("secure_transport_certs");
    absl::StatusOr<testing::TestCertificates> certs = testing::MakeTestCertificates(dir);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new testing::TestCertificates(*certs);
    token_file_ = new std::string(dir + "/token");
    testing::WriteFile(*token_file_, "  s3cret-token-for-tests\n");
    wrong_token_file_ = new std::string(dir + "/wrong-token");
    testing::WriteFile(*wrong_token_file_, "not-the-token");
  }

  // The server side of TLS, optionally mutual and with a token.
  static CredentialsOptions ServerTls(bool mutual = false, bool token = false) {
    CredentialsOptions c;
    c.kind = "tls";
    c.tls_cert = certs_->server_cert;
    c.tls_key = certs_->server_key;
    if (mutual) c.tls_client_ca = certs_->ca;
    if (token) c.auth_token_file = *token_file_;
    return c;
  }

  static CredentialsOptions ClientTls() {
    CredentialsOptions c;
    c.kind = "tls";
    c.tls_ca = certs_->ca;
    return c;
  }

  void StartServer(const CredentialsOptions& credentials) {
    StorageServerOptions options;
    options.data_dir = *data_dir_;
    options.port = 0;
    options.service.prep_workers = 1;
    options.stats_interval = absl::ZeroDuration();
    options.credentials = credentials;
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Refusals that gRPC reports as UNAVAILABLE are retried up to the connect
  // timeout: kept short so that the tests do not wait long.
  absl::StatusOr<std::unique_ptr<SampleClient>> Connect(const CredentialsOptions& credentials,
                                                        absl::Duration timeout = absl::Seconds(1)) {
    ClientOptions options;
    options.address = server_->address();
    options.credentials = credentials;
    options.connect_timeout = timeout;
    return SampleClient::Connect(options);
  }

  // Fetches every sample at the CROPPED stage through one stream.
  static absl::Status FetchAll(SampleClient* client) {
    AugmentOptions augment;
    augment.crop_size = 32;
    FetchRequestBuilder builder(/*epoch=*/0, /*seed=*/1, augment);
    for (uint64_t id = 0; id < kSamples; ++id) builder.Add(id, Stage::kCropped);
    std::unique_ptr<FetchCall> call = client->OpenFetch();
    if (!call->Write(builder.Take()) || !call->WritesDone()) return call->Finish();
    int received = 0;
    v1::FetchResponse response;
    while (call->Read(&response)) {
      for (const v1::Sample& sample : response.samples()) {
        if (absl::Status s = SampleStatus(sample); !s.ok()) return s;
        if (sample.payload().size() != 32u * 32u * 3u) {
          return absl::InternalError(absl::StrCat("sample ", sample.id(), " has ",
                                                  sample.payload().size(), " bytes"));
        }
        ++received;
      }
    }
    if (absl::Status s = call->Finish(); !s.ok()) return s;
    if (received != kSamples) {
      return absl::InternalError(absl::StrCat("received ", received, " samples"));
    }
    return absl::OkStatus();
  }

  // A client with `credentials` gets the manifest and every sample.
  void ExpectServes(const CredentialsOptions& credentials) {
    absl::StatusOr<std::unique_ptr<SampleClient>> client =
        Connect(credentials, absl::Seconds(30));
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->manifest().num_samples(), static_cast<uint32_t>(kSamples));
    EXPECT_TRUE(FetchAll(client->get()).ok());
    absl::StatusOr<v1::ServerStats> stats = (*client)->GetStats();
    EXPECT_TRUE(stats.ok()) << stats.status();
  }

  static std::string* data_dir_;
  static testing::TestCertificates* certs_;
  static std::string* token_file_;
  static std::string* wrong_token_file_;
  std::unique_ptr<StorageServer> server_;
};

std::string* SecureTransportTest::data_dir_ = nullptr;
testing::TestCertificates* SecureTransportTest::certs_ = nullptr;
std::string* SecureTransportTest::token_file_ = nullptr;
std::string* SecureTransportTest::wrong_token_file_ = nullptr;

TEST_F(SecureTransportTest, TlsServesManifestAndSamples) {
  StartServer(ServerTls());
  ExpectServes(ClientTls());
  // The name checked in the server's certificate may be overridden: its
  // DNS name works, a name it does not carry does not.
  CredentialsOptions named = ClientTls();
  named.tls_server_name = "localhost";
  ExpectServes(named);
  named.tls_server_name = "storage.example.org";
  absl::StatusOr<std::unique_ptr<SampleClient>> wrong_name = Connect(named);
  EXPECT_EQ(wrong_name.status().code(), absl::StatusCode::kUnavailable) << wrong_name.status();
  EXPECT_THAT(wrong_name.status().message(), HasSubstr("does not name storage.example.org"));
  ExpectServes(ClientTls());
}

TEST_F(SecureTransportTest, PlaintextClientIsRefusedByTlsServer) {
  StartServer(ServerTls());
  absl::StatusOr<std::unique_ptr<SampleClient>> client = Connect(CredentialsOptions());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
  EXPECT_THAT(client.status().message(), HasSubstr("this client uses plaintext"));
  EXPECT_THAT(client.status().message(), HasSubstr("a TLS server refuses plaintext clients"));
  ExpectServes(ClientTls());
}

TEST_F(SecureTransportTest, TlsClientIsRefusedByPlaintextServer) {
  StartServer(CredentialsOptions());
  absl::StatusOr<std::unique_ptr<SampleClient>> client = Connect(ClientTls());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("this client uses TLS"));
  EXPECT_THAT(client.status().message(), HasSubstr("when the server is plaintext"));
  ExpectServes(CredentialsOptions());
}

TEST_F(SecureTransportTest, ServerCertificateFromAnotherCaIsRefused) {
  StartServer(ServerTls());
  CredentialsOptions other = ClientTls();
  other.tls_ca = certs_->other_ca;
  absl::StatusOr<std::unique_ptr<SampleClient>> client = Connect(other);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr(absl::StrCat("is not signed by ", certs_->other_ca)));
  ExpectServes(ClientTls());
}

TEST_F(SecureTransportTest, MutualTlsNeedsAClientCertificateFromTheClientCa) {
  StartServer(ServerTls(/*mutual=*/true));
  // No client certificate.
  absl::StatusOr<std::unique_ptr<SampleClient>> none = Connect(ClientTls());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << none.status();
  EXPECT_THAT(none.status().message(),
              HasSubstr("the server requires a client certificate (mutual TLS) and this client "
                        "has none"));

  CredentialsOptions good = ClientTls();
  good.tls_cert = certs_->client_cert;
  good.tls_key = certs_->client_key;
  ExpectServes(good);

  // A certificate from an unrelated CA.
  CredentialsOptions wrong = ClientTls();
  wrong.tls_cert = certs_->other_client_cert;
  wrong.tls_key = certs_->other_client_key;
  absl::StatusOr<std::unique_ptr<SampleClient>> other = Connect(wrong);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable) << other.status();
  EXPECT_THAT(other.status().message(),
              HasSubstr(absl::StrCat("signed by a CA that did not sign ",
                                     certs_->other_client_cert)));

  ExpectServes(good);
}

TEST_F(SecureTransportTest, TokenIsRequiredAndChecked) {
  StartServer(ServerTls(/*mutual=*/false, /*token=*/true));
  // No token: refused at once (UNAUTHENTICATED is not retried).
  absl::StatusOr<std::unique_ptr<SampleClient>> none = Connect(ClientTls(), absl::Seconds(30));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("requires a bearer token"));
  EXPECT_THAT(none.status().message(), HasSubstr(server_->address()));

  CredentialsOptions wrong = ClientTls();
  wrong.auth_token_file = *wrong_token_file_;
  absl::StatusOr<std::unique_ptr<SampleClient>> bad = Connect(wrong, absl::Seconds(30));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnauthenticated) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("is not this storage server's"));
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("not-the-token")));

  CredentialsOptions good = ClientTls();
  good.auth_token_file = *token_file_;  // with surrounding whitespace in the file
  ExpectServes(good);
}

TEST_F(SecureTransportTest, MutualTlsWithTokenNeedsBoth) {
  StartServer(ServerTls(/*mutual=*/true, /*token=*/true));
  CredentialsOptions cert_only = ClientTls();
  cert_only.tls_cert = certs_->client_cert;
  cert_only.tls_key = certs_->client_key;
  EXPECT_EQ(Connect(cert_only, absl::Seconds(30)).status().code(),
            absl::StatusCode::kUnauthenticated);
  CredentialsOptions token_only = ClientTls();
  token_only.auth_token_file = *token_file_;
  EXPECT_EQ(Connect(token_only).status().code(), absl::StatusCode::kUnavailable);
  CredentialsOptions both = cert_only;
  both.auth_token_file = *token_file_;
  ExpectServes(both);
}

TEST_F(SecureTransportTest, ServerConfigurationErrorsNameTheOptionAndFile) {
  StorageServerOptions options;
  options.data_dir = *data_dir_;
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();

  options.credentials = ServerTls();
  options.credentials.tls_cert = "/no/such/server.pem";
  absl::Status status = StorageServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_cert"));
  EXPECT_THAT(status.message(), HasSubstr("/no/such/server.pem"));

  options.credentials = ServerTls();
  options.credentials.tls_cert.clear();
  status = StorageServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.tls_cert is required"));

  options.credentials = CredentialsOptions();
  options.credentials.auth_token_file = *token_file_;
  status = StorageServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.auth_token_file needs TLS"));

  options.credentials = ServerTls(false, true);
  options.credentials.auth_token_file = "/no/such/token";
  status = StorageServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("CredentialsOptions.auth_token_file"));
  EXPECT_THAT(status.message(), HasSubstr("/no/such/token"));
}

}  // namespace
}  // namespace sophon
