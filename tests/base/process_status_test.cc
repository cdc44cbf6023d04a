#include "sophon/base/process_status.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            (name + "." + std::to_string(getpid()))).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ProcessStatusTest, ParsesResidentMemoryAndThreads) {
  const std::string path = WriteTemp(
      "status", "Name:\tsophon\nVmPeak:\t  900 kB\nVmRSS:\t    1536 kB\nThreads:\t7\nSigQ:\t0/1\n");
  absl::StatusOr<ProcessStatus> status = ReadProcessStatus(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->rss_bytes, 1536u * 1024);
  EXPECT_EQ(status->threads, 7);
}

TEST(ProcessStatusTest, ErrorsNameTheFileAndTheField) {
  const std::string path = WriteTemp("status-nothreads", "VmRSS:\t12 kB\n");
  absl::StatusOr<ProcessStatus> status = ReadProcessStatus(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.status().message(), ::testing::HasSubstr(path));
  EXPECT_THAT(status.status().message(), ::testing::HasSubstr("Threads"));
  EXPECT_FALSE(ReadProcessStatus("/nonexistent/status").ok());
}

TEST(ProcessStatusTest, SeesThisProcessThreadsMemoryAndFiles) {
  absl::StatusOr<ProcessStatus> before = ReadProcessStatus();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(before->rss_bytes, 0u);
  absl::Notification started, stop;
  std::thread t([&] {
    started.Notify();
    stop.WaitForNotification();
  });
  started.WaitForNotification();
  absl::StatusOr<ProcessStatus> during = ReadProcessStatus();
  stop.Notify();
  t.join();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->threads, before->threads + 1);

  // 64 MB touched shows in the resident set.
  const uint64_t rss0 = ResidentBytes();
  ASSERT_GT(rss0, 0u);
  constexpr size_t kBytes = 64 << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  EXPECT_GE(ResidentBytes(), rss0 + kBytes / 2);
  EXPECT_GT(block[kBytes - 1], 0);

  const int fds = OpenFileDescriptors();
  ASSERT_GE(fds, 0);
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(OpenFileDescriptors(), fds + 1);
  close(fd);
}

}  // namespace
}  // namespace sophon
