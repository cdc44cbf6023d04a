// A rank that dies or stops: the survivor's next step ends with Unavailable
// within about the collective timeout and names the rank that is gone. The
// other rank is a real process (sophon-test-rank-helper) that the test kills
// with SIGKILL or stops with SIGSTOP.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/client/torch/ranks.h"
#include "tests/client/torch/skip_without_gloo.h"

extern char** environ;

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr int kTimeoutSeconds = 3;

// The helper process, ended (SIGKILL) and reaped when destroyed.
class RankProcess {
 public:
  // Starts rank `rank` of 2 at `port`, training `steps` steps.
  RankProcess(int rank, int port, int steps) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    stdin_ = fds[1];
    const std::vector<std::string> args = {SOPHON_RANK_HELPER,
                                           std::to_string(rank),
                                           "2",
                                           std::to_string(port),
                                           std::to_string(kTimeoutSeconds),
                                           std::to_string(steps)};
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    if (posix_spawn(&pid_, SOPHON_RANK_HELPER, &actions, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(fds[0]);
  }
  ~RankProcess() {
    if (stdin_ >= 0) close(stdin_);
    Kill();
  }
  bool started() const { return pid_ > 0; }

  // SIGKILL, and waits until the process is gone.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // SIGSTOP, and waits until the process is stopped.
  void Stop() {
    kill(pid_, SIGSTOP);
    int status;
    waitpid(pid_, &status, WUNTRACED);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
};

// This process's trainer: rank `rank` of 2 at `port`.
std::unique_ptr<Trainer> JoinAs(int rank, int port) {
  TrainerOptions options;
  options.arch = "tinymlp";
  options.num_classes = 4;
  options.threads = 1;
  options.distributed =
      testing::RankOptions(rank, 2, port, absl::Seconds(kTimeoutSeconds));
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

Batch StepBatch(int step, int rank) {
  Batch batch = testing::NoiseBatch(4, 32, 4, 100 + 10 * step + rank);
  batch.index = step;
  return batch;
}

TEST(DeadRankTest, AKilledRankIsNamed) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = testing::FreePort();
  RankProcess other(/*rank=*/1, port, /*steps=*/1);
  ASSERT_TRUE(other.started());
  std::unique_ptr<Trainer> trainer = JoinAs(0, port);
  ASSERT_NE(trainer, nullptr);
  // The all-reduce of step 0 needs both ranks: once it returns, both took it.
  ASSERT_TRUE(trainer->Step(StepBatch(0, 0)).ok());
  other.Kill();
  const absl::Time start = absl::Now();
  auto step = trainer->Step(StepBatch(1, 0));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(step.status().message(),
              HasSubstr("rank 1 of 2 stopped responding (last heartbeat "));
  EXPECT_THAT(step.status().message(),
              HasSubstr("collective all_reduce of gradients failed on rank 0 of 2: "));
  EXPECT_THAT(step.status().message(), HasSubstr("training step on batch 1"));
  // Gloo notices the closed connection at once; the heartbeats are watched
  // for three intervals (0.3 s each here). Far below the timeout.
  EXPECT_LT(took, absl::Seconds(kTimeoutSeconds)) << step.status();
}

TEST(DeadRankTest, AStoppedRankIsNamedAfterTheTimeout) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = testing::FreePort();
  RankProcess other(/*rank=*/1, port, /*steps=*/1);
  ASSERT_TRUE(other.started());
  std::unique_ptr<Trainer> trainer = JoinAs(0, port);
  ASSERT_NE(trainer, nullptr);
  ASSERT_TRUE(trainer->Step(StepBatch(0, 0)).ok());
  other.Stop();  // alive, connections open, silent
  const absl::Time start = absl::Now();
  auto step = trainer->Step(StepBatch(1, 0));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(step.status().message(),
              HasSubstr("rank 1 of 2 stopped responding (last heartbeat "));
  EXPECT_THAT(step.status().message(), HasSubstr("failed on rank 0 of 2: "));
  // Gloo's timeout, then three heartbeat intervals; generous for a busy machine.
  EXPECT_GE(took, absl::Seconds(kTimeoutSeconds) - absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(3 * kTimeoutSeconds)) << step.status();
}

TEST(DeadRankTest, AKilledStoreHostIsNamed) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const int port = testing::FreePort();
  RankProcess other(/*rank=*/0, port, /*steps=*/1);
  ASSERT_TRUE(other.started());
  std::unique_ptr<Trainer> trainer = JoinAs(1, port);
  ASSERT_NE(trainer, nullptr);
  ASSERT_TRUE(trainer->Step(StepBatch(0, 1)).ok());
  other.Kill();
  auto step = trainer->Step(StepBatch(1, 1));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(step.status().message(),
              HasSubstr("rank 0 of 2 (the TCPStore host at 127.0.0.1:" + std::to_string(port) +
                        ") is gone or not answering"));
  EXPECT_THAT(step.status().message(), HasSubstr("failed on rank 1 of 2: "));
}

}  // namespace
}  // namespace sophon
