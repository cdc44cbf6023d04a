// The SIGTERM drain of the sophon-server program as operators run it (a child
// process): a trainer over two replicas loses no sample and repeats none when
// one replica is terminated mid-epoch, and the process keeps to
// --drain-timeout whatever its clients do (a client that reads nothing is
// cancelled, not waited for; a second signal stops at once).
#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/loader/sample_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/net/wire.h"
#include "tests/client/job/run_program.h"
#include "tests/server/server_process.h"
#include "tests/test_util.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

using ::sophon::testing::ProgramRun;
using ::sophon::testing::RunProgram;
using ::sophon::testing::ServerProcess;
using ::testing::HasSubstr;

constexpr int kSamples = 192;

std::string Dataset() {
  testing::TestDatasetOptions d;
  d.classes = 2;
  d.per_class = kSamples / 2;
  d.min_side = 48;
  d.max_side = 64;
  return testing::MakeTestDataset("server_drain_program", d);
}

std::vector<std::string> ServerFlags(const std::string& data, const std::string& drain_timeout) {
  return {"--data=" + data,   "--host=127.0.0.1",  "--port=0", "--prep-workers=1",
          "--stats-interval=0", "--drain-timeout=" + drain_timeout};
}

// Samples the server at `address` has sent, over every stage.
uint64_t SamplesServed(const std::string& address) {
  ClientOptions options;
  options.address = address;
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(options);
  if (!client.ok()) return 0;
  absl::StatusOr<v1::ServerStats> stats = (*client)->GetStats();
  if (!stats.ok()) return 0;
  uint64_t n = 0;
  for (Stage stage : AllStages()) n += StatsSamplesAt(*stats, stage);
  return n;
}

// A connection from 127.0.0.2 whose Fetch stream asks for 64 tensors of crop
// 512 (3 MB each) and grants the server no byte of them: the stream's
// samples can never be sent.
std::unique_ptr<H2RawConnection> StuckClient(const std::string& address) {
  H2RawOptions o;
  o.port = std::stoi(address.substr(address.rfind(':') + 1));
  o.source_address = "127.0.0.2";
  o.receive_window = 0;
  o.read = false;
  absl::StatusOr<std::unique_ptr<H2RawConnection>> conn = H2RawConnection::Connect(o);
  if (!conn.ok()) {
    ADD_FAILURE() << conn.status();
    return nullptr;
  }
  AugmentOptions augment;
  augment.crop_size = 512;
  FetchRequestBuilder builder(0, 1, augment);
  for (int i = 0; i < 64; ++i) builder.Add(i % kSamples, Stage::kTensor);
  const std::string bytes = builder.Take().SerializeAsString();
  const uint32_t stream = (*conn)->StartCall("/sophon.v1.SampleService/Fetch", false);
  (*conn)->SendData(
      stream, H2RawConnection::GrpcPrefix(static_cast<uint32_t>(bytes.size())) + bytes, false);
  EXPECT_TRUE((*conn)->Flush(absl::Now() + absl::Seconds(5)));
  return *std::move(conn);
}

// How a signalled server stopped: its exit, the seconds from `since` to
// it, and its log.
struct Stopped {
  absl::StatusOr<int> exit;
  double seconds = 0;
  std::string log;
};

Stopped WaitStopped(ServerProcess& server, absl::Time since) {
  Stopped out;
  out.exit = server.WaitExit(absl::Seconds(30));
  out.seconds = absl::ToDoubleSeconds(absl::Now() - since);
  out.log = server.RestOfStdout();
  return out;
}

class ServerDrainProgramTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = new std::string(Dataset()); }
  static void TearDownTestSuite() { delete data_; }

  // sophon-train over both replicas: 2 epochs of resnet18 on an emulated GPU
  // that holds each batch 40 ms so that an epoch lasts about a second.
  ProgramRun Train(const std::string& servers, const std::string& digests) const {
    return RunProgram(SOPHON_TRAIN_BIN,
                      {"--server=" + servers, "--arch=resnet18", "--mode=nooff", "--epochs=2",
                       "--batch-size=8", "--workers=1", "--crop-size=32", "--seed=3",
                       "--device=emulate", "--gpu-batch-seconds=0.04",
                       "--gpu-profile=" SOPHON_SOURCE_DIR "/profiles/gpu/starter.csv",
                       "--progress=false",
                       "--connect-timeout=5s", "--batch-digests=" + digests});
  }

  static std::string* data_;
};

std::string* ServerDrainProgramTest::data_ = nullptr;

TEST_F(ServerDrainProgramTest, AReplicaTerminatedMidEpochLosesNoSampleAndRepeatsNone) {
  const std::string dir = testing::MakeTempDir("server_drain_program_digests");
  ServerProcess a(SOPHON_SERVER_BIN), b(SOPHON_SERVER_BIN);
  ASSERT_TRUE(a.Start(ServerFlags(*data_, "10s"), false).ok());
  ASSERT_TRUE(b.Start(ServerFlags(*data_, "10s"), false).ok());
  const std::string servers = a.address() + "," + b.address();
  const ProgramRun reference = Train(servers, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.command << "\n" << reference.output;
  const uint64_t after_reference = SamplesServed(a.address());
  ASSERT_GT(after_reference, 0u) << "the reference run never used replica A";

  ProgramRun run;
  absl::Notification trained;
  std::thread trainer([&] {
    run = Train(servers, dir + "/run");
    trained.Notify();
  });
  // A quarter of an epoch's samples from A: the trainer is in its first epoch.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (SamplesServed(a.address()) < after_reference + kSamples / 4 &&
         !trained.HasBeenNotified() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const bool mid_run = !trained.HasBeenNotified();
  a.Signal(SIGTERM);
  const absl::Time signalled = absl::Now();
  absl::StatusOr<int> exit = a.WaitExit(absl::Seconds(30));
  const double stop_s = absl::ToDoubleSeconds(absl::Now() - signalled);
  const std::string log = a.RestOfStdout();
  trainer.join();
  ASSERT_TRUE(mid_run) << "the trainer ended before replica A was terminated";
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(*exit, 0) << log << a.Stderr();
  EXPECT_LT(stop_s, 10.0) << log;
  // The drain's time is in the log.
  EXPECT_THAT(log, ::testing::ContainsRegex("drained in [0-9.]+ s"));
  EXPECT_THAT(log, ::testing::ContainsRegex("stopped [0-9.]+ s after signal 15"));
  EXPECT_EQ(run.exit_code, 0) << run.command << "\n" << run.output;
  // The same batches, byte for byte, as the run where A stayed: every sample
  // exactly once in each epoch.
  const std::string expected = testing::ReadFile(dir + "/reference");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(testing::ReadFile(dir + "/run"), expected);
}

TEST_F(ServerDrainProgramTest, AClientThatReadsNothingDoesNotStretchTheDrain) {
  ServerProcess server(SOPHON_SERVER_BIN);
  ASSERT_TRUE(server.Start(ServerFlags(*data_, "1s"), false).ok());
  std::unique_ptr<H2RawConnection> stuck = StuckClient(server.address());
  ASSERT_NE(stuck, nullptr);
  absl::SleepFor(absl::Milliseconds(500));  // its samples prepared, none sent
  server.Signal(SIGTERM);
  const Stopped stopped = WaitStopped(server, absl::Now());
  ASSERT_TRUE(stopped.exit.ok()) << stopped.exit.status();
  EXPECT_EQ(*stopped.exit, 0) << stopped.log << server.Stderr();
  // --drain-timeout=1s, and a little for a loaded machine; the shutdown
  // used to wait 2 s more for the stream its client never read.
  EXPECT_LT(stopped.seconds, 1.8) << stopped.log;
  EXPECT_THAT(stopped.log, HasSubstr("1 streams still open after"));
}

TEST_F(ServerDrainProgramTest, ASecondSignalStopsAtOnce) {
  ServerProcess server(SOPHON_SERVER_BIN);
  ASSERT_TRUE(server.Start(ServerFlags(*data_, "60s"), false).ok());
  std::unique_ptr<H2RawConnection> stuck = StuckClient(server.address());
  ASSERT_NE(stuck, nullptr);
  absl::SleepFor(absl::Milliseconds(500));
  server.Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(500));
  server.Signal(SIGTERM);
  const Stopped stopped = WaitStopped(server, absl::Now());
  ASSERT_TRUE(stopped.exit.ok()) << stopped.exit.status();
  EXPECT_EQ(*stopped.exit, 0) << stopped.log << server.Stderr();
  EXPECT_LT(stopped.seconds, 0.8) << stopped.log;
  EXPECT_THAT(stopped.log, HasSubstr("cut short by a second signal"));
}

}  // namespace
}  // namespace sophon
