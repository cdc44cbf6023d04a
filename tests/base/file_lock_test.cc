#include "sophon/base/file_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(FileLockTest, AnotherProcessWaitsUntilTheHolderLetsGo) {
  const std::string path = testing::MakeTempDir("file_lock") + "/lock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child holds the lock for 300 ms, telling the parent once it has it.
    absl::StatusOr<FileLock> lock = FileLock::Acquire(path);
    char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    absl::SleepFor(absl::Milliseconds(300));
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  bool waited = false;
  const absl::Time start = absl::Now();
  absl::StatusOr<FileLock> lock = FileLock::Acquire(path, [&] { waited = true; });
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_TRUE(waited) << "the child held the lock";
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  close(ready[1]);
}

TEST(FileLockTest, ReleasedWhenTheObjectGoes) {
  const std::string path = testing::MakeTempDir("file_lock_release") + "/lock";
  {
    absl::StatusOr<FileLock> first = FileLock::Acquire(path);
    ASSERT_TRUE(first.ok()) << first.status();
  }
  bool waited = false;
  absl::StatusOr<FileLock> again = FileLock::Acquire(path, [&] { waited = true; });
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(waited);
}

TEST(FileLockTest, AnUnwritablePathIsNamed) {
  absl::StatusOr<FileLock> lock = FileLock::Acquire("/proc/no-such-dir/lock");
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("/proc/no-such-dir/lock"), std::string::npos);
}

}  // namespace
}  // namespace sophon
