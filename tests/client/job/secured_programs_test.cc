// The training-node programs as operators run them against a storage server
// with TLS and a bearer token (sophon-server, a child process): sophon-train
// trains a model and saves it, and sophon-infer runs it, both served with the
// right CA and token and refused by name without the token or with another.
// Both programs take the same transport flags from the same code
// (client/cli/job_flags.h).
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/job/run_program.h"
#include "tests/server/server_process.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::sophon::testing::ProgramRun;
using ::sophon::testing::RunProgram;
using ::sophon::testing::ServerProcess;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kSamples = 6;

class SecuredProgramsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dataset;
    dataset.classes = 2;
    dataset.per_class = kSamples / 2;
    dataset.min_side = 48;
    dataset.max_side = 64;
    data_dir_ = testing::MakeTestDataset("secured_programs", dataset);
    dir_ = testing::MakeTempDir("secured_programs_certs");
    absl::StatusOr<testing::TestCertificates> certs = testing::MakeTestCertificates(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
    token_file_ = dir_ + "/token";
    testing::WriteFile(token_file_, "secured-programs-token\n");
    wrong_token_file_ = dir_ + "/wrong-token";
    testing::WriteFile(wrong_token_file_, "not-the-token");
    absl::Status started = server_.Start(
        {"--data=" + data_dir_, "--host=127.0.0.1", "--port=0", "--prep-workers=1",
         "--stats-interval=0", "--log-level=warn", "--tls-cert=" + certs_.server_cert,
         "--tls-key=" + certs_.server_key, "--auth-token-file=" + token_file_},
        /*metrics=*/false);
    ASSERT_TRUE(started.ok()) << started;
  }

  // The flags both programs share: the server, its CA and `token`.
  std::vector<std::string> ClientFlags(const std::string& token) const {
    std::vector<std::string> flags = {"--server=" + server_.address(), "--tls-ca=" + certs_.ca,
                                      "--connect-timeout=2s", "--crop-size=32",
                                      "--log-level=warn"};
    if (!token.empty()) flags.push_back("--auth-token-file=" + token);
    return flags;
  }

  // sophon-train: one epoch of tinymlp, saved to `model`.
  ProgramRun Train(const std::string& token, const std::string& model) const {
    std::vector<std::string> flags = ClientFlags(token);
    for (const char* f : {"--arch=tinymlp", "--mode=nooff", "--epochs=1", "--batch-size=3",
                          "--workers=1", "--progress=false"}) {
      flags.push_back(f);
    }
    flags.push_back("--save=" + model);
    return RunProgram(SOPHON_TRAIN_BIN, flags);
  }

  ProgramRun Infer(const std::string& token, const std::string& model,
                   const std::string& out) const {
    std::vector<std::string> flags = ClientFlags(token);
    for (const char* f : {"--mode=nooff", "--batch-size=4", "--workers=1", "--progress=false",
                          "--top-k=2"}) {
      flags.push_back(f);
    }
    flags.push_back("--model=" + model);
    flags.push_back("--out=" + out);
    return RunProgram(SOPHON_INFER_BIN, flags);
  }

  std::string data_dir_, dir_, token_file_, wrong_token_file_;
  testing::TestCertificates certs_;
  ServerProcess server_{SOPHON_SERVER_BIN};
};

TEST_F(SecuredProgramsTest, TrainAndInferAreServedWithTheTokenAndRefusedByNameWithout) {
  const std::string model = dir_ + "/model.pt";
  const ProgramRun train = Train(token_file_, model);
  ASSERT_EQ(train.exit_code, 0) << train.command << "\n" << train.output;

  const std::string out = dir_ + "/predictions.csv";
  const ProgramRun infer = Infer(token_file_, model, out);
  ASSERT_EQ(infer.exit_code, 0) << infer.command << "\n" << infer.output;
  const std::vector<std::string> lines =
      absl::StrSplit(testing::ReadFile(out), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + kSamples) << testing::ReadFile(out);  // a header, a line a sample

  // Without a token, and with another one: refused, saying why, nothing written.
  for (const std::string& token : {std::string(), wrong_token_file_}) {
    const std::string refused_out = dir_ + "/refused.csv";
    const ProgramRun refused = Infer(token, model, refused_out);
    EXPECT_EQ(refused.exit_code, 1) << refused.command << "\n" << refused.output;
    // The refusal names the flag to fix and the server.
    EXPECT_THAT(refused.output, HasSubstr("sophon-infer: --auth-token-file: ")) << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("bearer token")) << refused.output;
    EXPECT_THAT(refused.output, HasSubstr(server_.address())) << refused.output;
    EXPECT_THAT(refused.output, Not(HasSubstr("not-the-token")));
    const ProgramRun refused_train = Train(token, dir_ + "/refused.pt");
    EXPECT_EQ(refused_train.exit_code, 1) << refused_train.command << "\n" << refused_train.output;
    EXPECT_THAT(refused_train.output, HasSubstr("sophon-train: --auth-token-file: "))
        << refused_train.output;
  }
  // Plaintext to the TLS server: refused too (gRPC: UNAVAILABLE), naming the server.
  std::vector<std::string> plain = {"--server=" + server_.address(), "--connect-timeout=1s",
                                    "--model=" + model, "--out=" + dir_ + "/plain.csv",
                                    "--progress=false"};
  const ProgramRun plaintext = RunProgram(SOPHON_INFER_BIN, plain);
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr(server_.address())) << plaintext.output;
}

TEST_F(SecuredProgramsTest, ABadTransportFlagIsNamedBeforeAnyServerIsReached) {
  std::vector<std::string> flags = {"--server=" + server_.address(), "--tls-cert=" + certs_.client_cert,
                                    "--model=" + dir_ + "/none.pt", "--out="};
  // --tls-cert without --tls-key: a usage error naming the flag (exit 2).
  const ProgramRun run = RunProgram(SOPHON_INFER_BIN, flags);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--tls-")) << run.output;
}

}  // namespace
}  // namespace sophon
