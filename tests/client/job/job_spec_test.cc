#include "client/job/job_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

JobSpec ValidSpec() {
  JobSpec spec;
  spec.servers.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  spec.loader.batch_size = 4;
  return spec;
}

TEST(JobSpecTest, AValidSpecPasses) { EXPECT_TRUE(ValidSpec().Validate().ok()); }

TEST(JobSpecTest, EveryClientGetsTheSameTransportWithAutoResolved) {
  JobSpec spec = ValidSpec();
  spec.servers.connect_timeout = absl::Seconds(7);
  std::vector<ClientOptions> clients = spec.servers.Clients();
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0].credentials.kind, "insecure");
  EXPECT_EQ(clients[1].address, "127.0.0.1:2");
  EXPECT_EQ(clients[1].connect_timeout, absl::Seconds(7));

  spec.servers.credentials.tls_ca = "/ca.pem";
  spec.servers.credentials.auth_token_file = "/token";
  clients = spec.servers.Clients();
  for (const ClientOptions& c : clients) {
    EXPECT_EQ(c.credentials.kind, "tls");
    EXPECT_EQ(c.credentials.tls_ca, "/ca.pem");
    EXPECT_EQ(c.credentials.auth_token_file, "/token");
  }
  // A kind named explicitly is kept.
  spec.servers.credentials = CredentialsOptions();
  spec.servers.credentials.kind = "tls";
  EXPECT_EQ(spec.servers.Clients()[0].credentials.kind, "tls");
}

TEST(JobSpecTest, ErrorsNameTheField) {
  JobSpec spec = ValidSpec();
  spec.servers.addresses.clear();
  EXPECT_THAT(spec.Validate().message(), HasSubstr("ServersSpec.addresses"));

  spec = ValidSpec();
  spec.servers.credentials.tls_cert = "/client.pem";  // without its key
  absl::Status s = spec.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("CredentialsOptions.tls_cert"));

  spec = ValidSpec();
  spec.servers.credentials.kind = "insecure";
  spec.servers.credentials.auth_token_file = "/token";  // a token never goes in plaintext
  EXPECT_FALSE(spec.Validate().ok());

  spec = ValidSpec();
  spec.servers.connect_timeout = absl::Seconds(-1);
  EXPECT_THAT(spec.Validate().message(), HasSubstr("ClientOptions.connect_timeout"));

  spec = ValidSpec();
  spec.loader.batch_size = 0;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("LoaderOptions.batch_size"));

  spec = ValidSpec();
  spec.cache.dir = "/tmp/somewhere";  // without a bound
  EXPECT_THAT(spec.Validate().message(), HasSubstr("LocalCacheOptions"));

  spec = ValidSpec();
  spec.ingress_mbit = -2;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("JobSpec.ingress_mbit"));
  spec.ingress_mbit = -1;  // probe
  EXPECT_TRUE(spec.Validate().ok());
}

TEST(JobSpecTest, SmartoffOptionsAreCheckedOnlyForASmartMode) {
  JobSpec spec = ValidSpec();
  spec.smartoff.replan_threshold = 0;
  spec.mode = PlannerKind::kNoOff;
  EXPECT_TRUE(spec.Validate().ok());
  spec.mode = PlannerKind::kOptimal;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("SmartoffOptions.replan_threshold"));
}

}  // namespace
}  // namespace sophon
