#include "client/train/batch_timings.h"

#include "client/train/csv_log.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(BatchTimingsTest, WritesHeaderAndOneLinePerBatch) {
  const std::string path = testing::MakeTempDir("batch_timings") + "/t.csv";
  absl::StatusOr<std::unique_ptr<CsvLog>> w =
      CsvLog::Create(path, kBatchTimingsHeader, kBatchTimingsWhat);
  ASSERT_TRUE(w.ok()) << w.status();
  AddBatchTimings(w->get(), 0, 0, 64, 0.5, 0.003, 0.023);
  AddBatchTimings(w->get(), 1, 7, 12, 0.0, 0.0, 1.25);
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(testing::ReadFile(path),
            "epoch,batch,samples,data_wait_s,copy_s,compute_s\n"
            "0,0,64,0.500000,0.003000,0.023000\n"
            "1,7,12,0.000000,0.000000,1.250000\n");
}

TEST(BatchTimingsTest, UnwritablePathIsAnErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<CsvLog>> w =
      CsvLog::Create("/nonexistent-dir/t.csv", kBatchTimingsHeader, kBatchTimingsWhat);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(w.status().message().find("/nonexistent-dir/t.csv"), std::string::npos);
  EXPECT_NE(w.status().message().find("batch timings"), std::string::npos);
}

TEST(BatchTimingsTest, NoPathNoFile) {
  absl::StatusOr<std::unique_ptr<CsvLog>> w = CsvLog::Create("", kBatchTimingsHeader, "x");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, nullptr);
}

}  // namespace
}  // namespace sophon
