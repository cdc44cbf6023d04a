#include "client/train/epoch_steps.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

// A trainer on an asynchronous device: each step's result comes back
// `lag` submits later, or at Drain. Step k of n samples has loss k and k
// correct.
class LaggingTrainer final : public Trainer {
 public:
  explicit LaggingTrainer(int lag) : lag_(lag) {}
  absl::StatusOr<StepResult> Step(const Batch&) override {
    return absl::UnimplementedError("Submit only");
  }
  absl::StatusOr<std::vector<StepResult>> Submit(const Batch& batch) override {
    if (batch.index == fail_at) return absl::InternalError("device lost");
    StepResult r;
    r.count = batch.n;
    r.loss = static_cast<double>(batch.index);
    r.correct = batch.index;
    queue_.push_back(r);
    std::vector<StepResult> out;
    while (static_cast<int>(queue_.size()) > lag_) {
      out.push_back(queue_.front());
      queue_.pop_front();
    }
    return out;
  }
  absl::StatusOr<std::vector<StepResult>> Drain() override {
    std::vector<StepResult> out(queue_.begin(), queue_.end());
    if (extra_at_drain) out.push_back(StepResult{});
    queue_.clear();
    return out;
  }
  absl::StatusOr<StepResult> Evaluate(const Batch&) override { return StepResult{}; }
  std::string DeviceName() const override { return "fake"; }
  absl::StatusOr<std::vector<std::string>> Save(const std::string&) override {
    return std::vector<std::string>{};
  }

  int64_t fail_at = -1;
  bool extra_at_drain = false;

 private:
  const int lag_;
  std::deque<StepResult> queue_;
};

Batch BatchOf(int64_t index, int n) {
  Batch b;
  b.index = index;
  b.n = n;
  return b;
}

TEST(EpochStepsTest, LateResultsAreEachAccountedOnceInOrder) {
  const std::string path = testing::MakeTempDir("epoch_steps") + "/timings.csv";
  auto log = CsvLog::Create(path, "epoch,batch,samples,data_wait_s,copy_s,compute_s", "timings");
  ASSERT_TRUE(log.ok()) << log.status();
  LaggingTrainer trainer(/*lag=*/2);
  EpochReport report;
  EpochTally tally;
  DivergenceWatch divergence({});
  EpochSteps steps(&trainer, /*epoch=*/3, &report, &tally, &divergence, log->get());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(steps.Submit(BatchOf(i, 10), i, /*wait_seconds=*/0.5).ok());
    EXPECT_EQ(steps.pending(), std::min(i + 1, 2)) << "after step " << i;
  }
  // Results of steps 0..2 arrived; the newest is step 2's.
  ASSERT_TRUE(steps.latest().has_value());
  EXPECT_EQ(steps.latest()->loss, 2.0);
  EXPECT_EQ(tally.seen(), 30);
  ASSERT_TRUE(steps.Finish().ok());
  EXPECT_EQ(steps.pending(), 0);
  EXPECT_EQ(steps.latest()->loss, 4.0);
  EXPECT_EQ(tally.seen(), 50);
  report.wall_seconds = 1;
  tally.Finish(&report);
  EXPECT_NEAR(report.mean_loss, (0 + 1 + 2 + 3 + 4) / 5.0, 1e-12);  // every step once
  EXPECT_NEAR(report.top1, (0 + 1 + 2 + 3 + 4) / 50.0, 1e-12);
  ASSERT_TRUE((*log)->Close().ok());
  // One row per step, in order, with the wait that step's batch took.
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(std::getline(in, line)) << "row " << i;
    EXPECT_THAT(line, ::testing::StartsWith(absl::StrCat("3,", i, ",10,0.5")));
  }
  EXPECT_FALSE(std::getline(in, line));
}

TEST(EpochStepsTest, ErrorsNameTheStepOrTheEpoch) {
  LaggingTrainer trainer(/*lag=*/1);
  EpochReport report;
  EpochTally tally;
  DivergenceWatch divergence({});
  trainer.fail_at = 1;
  EpochSteps steps(&trainer, /*epoch=*/2, &report, &tally, &divergence, nullptr);
  ASSERT_TRUE(steps.Submit(BatchOf(0, 4), 0, 0).ok());
  absl::StatusOr<double> failed = steps.Submit(BatchOf(1, 4), 1, 0);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("training step 1 of epoch 2: device lost"));

  // A trainer that hands back more results than steps submitted is caught.
  LaggingTrainer extra(/*lag=*/1);
  extra.extra_at_drain = true;
  EpochSteps more(&extra, /*epoch=*/0, &report, &tally, &divergence, nullptr);
  ASSERT_TRUE(more.Submit(BatchOf(0, 4), 0, 0).ok());
  absl::Status finished = more.Finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(finished.message()), HasSubstr("1 too many"));
}

TEST(EpochStepsTest, ASynchronousTrainerReportsEachStepAtOnce) {
  LaggingTrainer trainer(/*lag=*/0);
  EpochReport report;
  EpochTally tally;
  DivergenceWatch divergence({});
  EpochSteps steps(&trainer, 0, &report, &tally, &divergence, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(steps.Submit(BatchOf(i, 2), i, 0).ok());
    EXPECT_EQ(steps.pending(), 0);
    EXPECT_EQ(steps.latest()->loss, static_cast<double>(i));
  }
  EXPECT_TRUE(steps.Finish().ok());
  EXPECT_EQ(tally.seen(), 6);
}

}  // namespace
}  // namespace sophon
