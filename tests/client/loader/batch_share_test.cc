#include "client/loader/batch_share.h"

#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {
namespace fs = std::filesystem;

constexpr uint64_t kKey = 0x5eed;
constexpr int64_t kBatchBytes = 1000;

std::unique_ptr<BatchShare> Open(const std::string& dir, int64_t window_bytes = 4 * kBatchBytes,
                                 uint64_t key = kKey) {
  BatchShareOptions options;
  options.dir = dir;
  options.window_bytes = window_bytes;
  absl::StatusOr<std::unique_ptr<BatchShare>> share = BatchShare::Open(options, key);
  EXPECT_TRUE(share.ok()) << share.status();
  return share.ok() ? *std::move(share) : nullptr;
}

// A batch's bytes as its maker writes them: a flag part and a payload part.
std::string BatchBytes(uint64_t seq) {
  std::string bytes(kBatchBytes, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(seq * 31 + i);
  return bytes;
}

// Takes batch `seq`: its bytes when read, "" when claimed (`claim` then holds it).
std::string Take(BatchShare* share, uint64_t seq, BatchShare::Claim* claim,
                 BatchShare::Outcome* outcome = nullptr) {
  std::string bytes(kBatchBytes, '\0');
  const absl::Span<char> parts[] = {absl::MakeSpan(bytes.data(), 10),
                                    absl::MakeSpan(bytes.data() + 10, bytes.size() - 10)};
  const BatchShare::Outcome o = share->Take(seq, parts, claim, [] { return false; });
  if (outcome != nullptr) *outcome = o;
  return o == BatchShare::Outcome::kRead ? bytes : "";
}

absl::Status Publish(BatchShare* share, uint64_t seq, BatchShare::Claim claim) {
  const std::string bytes = BatchBytes(seq);
  const absl::Span<const char> parts[] = {absl::MakeConstSpan(bytes.data(), 10),
                                          absl::MakeConstSpan(bytes.data() + 10, bytes.size() - 10)};
  return share->Publish(seq, parts, std::move(claim));
}

TEST(BatchShareTest, TheFirstClaimsAndTheSecondReadsWhatItPublished) {
  const std::string dir = testing::MakeTempDir("batch_share_basic");
  std::unique_ptr<BatchShare> a = Open(dir), b = Open(dir);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->folder(), b->folder());
  BatchShare::Claim claim;
  EXPECT_EQ(Take(a.get(), 0, &claim), "");
  EXPECT_TRUE(claim.held());
  // b waits while a makes it, and reads it once published.
  std::string read;
  std::thread reader([&] {
    BatchShare::Claim none;
    read = Take(b.get(), 0, &none);
    EXPECT_FALSE(none.held());
  });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(Publish(a.get(), 0, std::move(claim)).ok());
  reader.join();
  EXPECT_EQ(read, BatchBytes(0));
  EXPECT_EQ(a->stats().claimed, 1u);
  EXPECT_EQ(a->stats().published, 1u);
  EXPECT_EQ(b->stats().read, 1u);
  EXPECT_GT(b->stats().wait_seconds, 0.0);
  // The folder is the user's alone.
  struct stat st;
  ASSERT_EQ(stat(a->folder().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(BatchShareTest, TheLastToLeaveRemovesTheFolder) {
  const std::string dir = testing::MakeTempDir("batch_share_leave");
  std::string folder;
  {
    std::unique_ptr<BatchShare> a = Open(dir);
    ASSERT_TRUE(a);
    folder = a->folder();
    {
      std::unique_ptr<BatchShare> b = Open(dir);
      BatchShare::Claim claim;
      Take(b.get(), 3, &claim);
      ASSERT_TRUE(Publish(b.get(), 3, std::move(claim)).ok());
    }
    // a still uses it.
    EXPECT_TRUE(fs::exists(folder + "/0000000000000003.batch"));
  }
  EXPECT_FALSE(fs::exists(folder));
}

// This user's folder and the key's folder: each refused when others could open it.
TEST(BatchShareTest, AFolderOthersCouldOpenIsRefused) {
  const std::string dir = testing::MakeTempDir("batch_share_mode");
  const std::string mine = absl::StrFormat("%s/sophon-%d", dir, geteuid());
  const std::string folder = absl::StrFormat("%s/%016x", mine, kKey);
  BatchShareOptions options;
  options.dir = dir;
  for (const std::string& open_one : {mine, folder}) {
    fs::remove_all(mine);
    ASSERT_EQ(mkdir(mine.c_str(), open_one == mine ? 0755 : 0700), 0);
    if (open_one == folder) ASSERT_EQ(mkdir(folder.c_str(), 0755), 0);
    absl::StatusOr<std::unique_ptr<BatchShare>> share = BatchShare::Open(options, kKey);
    ASSERT_FALSE(share.ok()) << open_one;
    EXPECT_EQ(share.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(share.status().message().find(open_one + "'"), std::string::npos) << share.status();
  }
}

// A job that holds a claim and never makes the batch (stopped, stuck) holds
// another back for max_wait at most: it then makes the batch itself, unshared.
TEST(BatchShareTest, AClaimHeldTooLongIsWaitedOut) {
  const std::string dir = testing::MakeTempDir("batch_share_wait");
  BatchShareOptions options;
  options.dir = dir;
  options.max_wait = absl::Milliseconds(100);
  std::unique_ptr<BatchShare> stuck = Open(dir);
  absl::StatusOr<std::unique_ptr<BatchShare>> other = BatchShare::Open(options, kKey);
  ASSERT_TRUE(other.ok()) << other.status();
  BatchShare::Claim held;
  Take(stuck.get(), 4, &held);
  ASSERT_TRUE(held.held());
  BatchShare::Claim claim;
  BatchShare::Outcome outcome;
  const absl::Time start = absl::Now();
  EXPECT_EQ(Take(other->get(), 4, &claim, &outcome), "");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(outcome, BatchShare::Outcome::kClaimed);
  EXPECT_FALSE(claim.held());  // made there, not published
  EXPECT_EQ((*other)->stats().waited_out, 1u);
}

TEST(BatchShareTest, BatchesBehindTheWindowGoAndALateJobMakesThemItself) {
  const std::string dir = testing::MakeTempDir("batch_share_window");
  std::unique_ptr<BatchShare> leader = Open(dir, 2 * kBatchBytes), late = Open(dir, 2 * kBatchBytes);
  for (uint64_t seq = 0; seq < 6; ++seq) {
    BatchShare::Claim claim;
    ASSERT_EQ(Take(leader.get(), seq, &claim), "");
    ASSERT_TRUE(Publish(leader.get(), seq, std::move(claim)).ok());
  }
  // Two batches' bytes: the newest two kept.
  int files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(leader->folder())) {
    if (e.path().extension() == ".batch") ++files;
  }
  EXPECT_EQ(files, 2);
  EXPECT_FALSE(fs::exists(leader->folder() + "/0000000000000003.batch"));
  EXPECT_TRUE(fs::exists(leader->folder() + "/0000000000000004.batch"));
  // The late job never waits for the leader: batch 0 is made again here.
  BatchShare::Claim claim;
  BatchShare::Outcome outcome;
  EXPECT_EQ(Take(late.get(), 0, &claim, &outcome), "");
  EXPECT_EQ(outcome, BatchShare::Outcome::kClaimed);
  EXPECT_TRUE(claim.held());
  // Batch 5 is still there.
  BatchShare::Claim none;
  EXPECT_EQ(Take(late.get(), 5, &none), BatchBytes(5));
}

TEST(BatchShareTest, AFileOfAnotherSizeIsRemovedAndTheBatchClaimed) {
  const std::string dir = testing::MakeTempDir("batch_share_size");
  std::unique_ptr<BatchShare> share = Open(dir);
  {
    std::ofstream f(share->folder() + "/0000000000000002.batch");
    f << "short";
  }
  BatchShare::Claim claim;
  BatchShare::Outcome outcome;
  EXPECT_EQ(Take(share.get(), 2, &claim, &outcome), "");
  EXPECT_EQ(outcome, BatchShare::Outcome::kClaimed);
  EXPECT_FALSE(fs::exists(share->folder() + "/0000000000000002.batch"));
}

TEST(BatchShareTest, AWaiterStopsWhenAsked) {
  const std::string dir = testing::MakeTempDir("batch_share_stop");
  std::unique_ptr<BatchShare> a = Open(dir), b = Open(dir);
  BatchShare::Claim claim;
  Take(a.get(), 0, &claim);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stop = true;
  });
  std::string bytes(kBatchBytes, '\0');
  const absl::Span<char> parts[] = {absl::MakeSpan(bytes)};
  BatchShare::Claim none;
  EXPECT_EQ(b->Take(0, parts, &none, [&] { return stop.load(); }),
            BatchShare::Outcome::kStopped);
  stopper.join();
}

// A process that holds a batch's claim and is killed with SIGKILL in the
// middle of writing it: the claim goes with it, the half-written file is never
// read, and the waiting job makes the batch.
TEST(BatchShareTest, AMakerKilledMidWriteHoldsNoOneBack) {
  const std::string dir = testing::MakeTempDir("batch_share_kill");
  std::unique_ptr<BatchShare> waiter = Open(dir);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::unique_ptr<BatchShare> maker = Open(dir);
    BatchShare::Claim claim;
    Take(maker.get(), 7, &claim);
    // Half of the batch written where Publish writes it first.
    std::ofstream f(absl::StrFormat("%s/%016x.tmp.%d", maker->folder(), 7, getpid()));
    f << std::string(kBatchBytes / 2, 'x');
    f.flush();
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::atomic<bool> done{false};
  BatchShare::Claim claim;
  BatchShare::Outcome outcome = BatchShare::Outcome::kStopped;
  std::thread taker([&] {
    std::string bytes(kBatchBytes, '\0');
    const absl::Span<char> parts[] = {absl::MakeSpan(bytes)};
    outcome = waiter->Take(7, parts, &claim, [] { return false; });
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(done.load());  // waits while the maker lives
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  taker.join();
  EXPECT_EQ(outcome, BatchShare::Outcome::kClaimed);
  EXPECT_TRUE(claim.held());
  EXPECT_EQ(waiter->stats().taken_over, 1u);
  ASSERT_TRUE(Publish(waiter.get(), 7, std::move(claim)).ok());
  BatchShare::Claim none;
  EXPECT_EQ(Take(waiter.get(), 7, &none), BatchBytes(7));
  close(ready[0]);
  close(ready[1]);
}

// Eight processes take the same twenty batches: each is made once, and every
// process reads every batch's bytes.
TEST(BatchShareTest, EightProcessesMakeEachBatchOnce) {
  const std::string dir = testing::MakeTempDir("batch_share_eight");
  constexpr int kProcesses = 8;
  constexpr uint64_t kBatches = 20;
  int counts[2], opened[2], go[2];
  ASSERT_EQ(pipe(counts), 0);
  ASSERT_EQ(pipe(opened), 0);
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::unique_ptr<BatchShare> share = Open(dir, 64 * kBatchBytes);
      // All eight have it open before any takes a batch (a process that
      // came after the others had all left would find the folder gone).
      char c = 'o';
      (void)!write(opened[1], &c, 1);
      if (read(go[0], &c, 1) != 1) _exit(3);
      int made = 0, good = 0;
      for (uint64_t seq = 0; seq < kBatches; ++seq) {
        BatchShare::Claim claim;
        const std::string read = Take(share.get(), seq, &claim);
        if (claim.held()) {
          ++made;
          ++good;
          if (!Publish(share.get(), seq, std::move(claim)).ok()) _exit(2);
        } else if (read == BatchBytes(seq)) {
          ++good;
        }
      }
      const int result[2] = {made, good};
      (void)!write(counts[1], result, sizeof(result));
      share.reset();
      _exit(0);
    }
    children.push_back(child);
  }
  for (int p = 0; p < kProcesses; ++p) {
    char c;
    ASSERT_EQ(read(opened[0], &c, 1), 1);
  }
  ASSERT_EQ(write(go[1], std::string(kProcesses, 'g').data(), kProcesses), kProcesses);
  int made = 0;
  for (pid_t child : children) {
    int result[2];
    ASSERT_EQ(read(counts[0], result, sizeof(result)), static_cast<ssize_t>(sizeof(result)));
    made += result[0];
    EXPECT_EQ(result[1], static_cast<int>(kBatches));
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(made, static_cast<int>(kBatches));
  // The last process removed the folder.
  EXPECT_FALSE(fs::exists(absl::StrFormat("%s/sophon-%d/%016x", dir, geteuid(), kKey)));
  for (int fd : {counts[0], counts[1], opened[0], opened[1], go[0], go[1]}) close(fd);
}

}  // namespace
}  // namespace sophon
