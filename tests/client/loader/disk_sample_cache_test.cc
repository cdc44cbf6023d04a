#include "client/loader/disk_sample_cache.h"

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sophon/base/file_lock.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::SampleFileBytes;

DiskSampleCacheOptions Options(const std::string& dir, int64_t entries, uint64_t fingerprint = 42) {
  DiskSampleCacheOptions options;
  options.dir = dir;
  options.max_bytes = entries * (1000 + DiskSampleCache::kHeaderBytes);
  options.fingerprint = fingerprint;
  options.num_samples = 100;
  return options;
}

std::unique_ptr<DiskSampleCache> Open(const DiskSampleCacheOptions& options) {
  absl::StatusOr<std::unique_ptr<DiskSampleCache>> cache = DiskSampleCache::Open(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

// An entry written for one version of its sample's file is never served for
// another: removed unread (counted stale), and a Put writes the new one.
TEST(DiskSampleCacheTest, AnEntryOfAnotherVersionIsNeverServed) {
  const std::string dir = testing::MakeTempDir("disk_cache_version");
  DiskSampleCacheOptions options = Options(dir, 10);
  options.versions.assign(100, 7);
  {
    std::unique_ptr<DiskSampleCache> cache = Open(options);
    ASSERT_TRUE(cache);
    EXPECT_TRUE(cache->Put(3, SampleFileBytes(3)));
    EXPECT_TRUE(cache->Put(4, SampleFileBytes(4)));
  }
  options.versions[3] = 8;  // sample 3's file changed
  std::unique_ptr<DiskSampleCache> cache = Open(options);
  ASSERT_TRUE(cache);
  std::string out;
  EXPECT_FALSE(cache->Get(3, &out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(cache->stats().stale, 1u);
  EXPECT_EQ(cache->stats().corrupt, 0u);
  EXPECT_TRUE(cache->Get(4, &out));
  EXPECT_TRUE(cache->Put(3, SampleFileBytes(3) + "new"));
  EXPECT_TRUE(cache->Get(3, &out));
  EXPECT_EQ(out, SampleFileBytes(3) + "new");
  // The count stays exact: the stale entry's bytes left it, the new one's came in.
  EXPECT_EQ(cache->stats().usage_bytes,
            static_cast<int64_t>(SampleFileBytes(3).size() + 3 + SampleFileBytes(4).size()) +
                2 * DiskSampleCache::kHeaderBytes);
  // Another process, for which sample 4 changed too: a miss, then its new copy.
  options.versions[4] = 9;
  std::unique_ptr<DiskSampleCache> other = Open(options);
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->Get(4, &out));
  EXPECT_EQ(other->stats().stale, 1u);
  EXPECT_TRUE(other->Put(4, SampleFileBytes(4) + "v9"));
  EXPECT_TRUE(other->Get(4, &out));
  EXPECT_EQ(out, SampleFileBytes(4) + "v9");
}

TEST(DiskSampleCacheTest, EntriesOutliveTheProcessThatWroteThem) {
  const std::string dir = testing::MakeTempDir("disk_cache_restart");
  {
    std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
    ASSERT_TRUE(cache);
    std::string out;
    EXPECT_FALSE(cache->Get(3, &out));
    EXPECT_TRUE(cache->Put(3, SampleFileBytes(3)));
    EXPECT_TRUE(cache->Put(7, SampleFileBytes(7)));
    EXPECT_TRUE(cache->Get(3, &out));
    EXPECT_EQ(out, SampleFileBytes(3));
  }
  // A later job over the same dataset: warm from the start.
  std::unique_ptr<DiskSampleCache> again = Open(Options(dir, 10));
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->Contains(3));
  EXPECT_TRUE(again->Contains(7));
  EXPECT_FALSE(again->Contains(4));
  std::string out;
  EXPECT_TRUE(again->Get(7, &out));
  EXPECT_EQ(out, SampleFileBytes(7));
  EXPECT_EQ(again->stats().usage_bytes, 2 * (1000 + DiskSampleCache::kHeaderBytes));
}

// Two processes of a node (ranks) add to one folder: each reports the folder's usage,
// whichever wrote last.
TEST(DiskSampleCacheTest, EveryProcessOfTheNodeReportsTheFoldersUsage) {
  const std::string dir = testing::MakeTempDir("disk_cache_shared_usage");
  std::unique_ptr<DiskSampleCache> rank0 = Open(Options(dir, 10));
  std::unique_ptr<DiskSampleCache> rank1 = Open(Options(dir, 10));
  ASSERT_TRUE(rank0 && rank1);
  ASSERT_TRUE(rank1->Put(1, SampleFileBytes(1)));
  ASSERT_TRUE(rank0->Put(2, SampleFileBytes(2)));
  const int64_t two = 2 * (1000 + DiskSampleCache::kHeaderBytes);
  EXPECT_EQ(rank1->stats().usage_bytes, two) << "rank 0's entry, written after rank 1's";
  EXPECT_EQ(rank0->stats().usage_bytes, two);
}

TEST(DiskSampleCacheTest, AnotherDatasetNeverReadsTheseEntries) {
  const std::string dir = testing::MakeTempDir("disk_cache_fingerprint");
  std::unique_ptr<DiskSampleCache> first = Open(Options(dir, 10, /*fingerprint=*/1));
  ASSERT_TRUE(first && first->Put(5, SampleFileBytes(5)));
  std::unique_ptr<DiskSampleCache> other = Open(Options(dir, 10, /*fingerprint=*/2));
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->Contains(5));
  std::string out;
  EXPECT_FALSE(other->Get(5, &out));
  EXPECT_NE(first->folder(), other->folder());
  // An entry copied into the other dataset's folder is refused by its header.
  std::filesystem::copy_file(first->EntryPath(5), other->EntryPath(5));
  EXPECT_FALSE(other->Get(5, &out));
  EXPECT_EQ(other->stats().corrupt, 1u);
  EXPECT_FALSE(std::filesystem::exists(other->EntryPath(5)));
}

TEST(DiskSampleCacheTest, ADamagedEntryIsRemovedAndMissed) {
  const std::string dir = testing::MakeTempDir("disk_cache_corrupt");
  std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
  ASSERT_TRUE(cache && cache->Put(9, SampleFileBytes(9)) && cache->Put(10, SampleFileBytes(10)));
  {
    std::fstream f(cache->EntryPath(9), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(DiskSampleCache::kHeaderBytes + 17);
    f.put('\x5a');
  }
  std::filesystem::resize_file(cache->EntryPath(10), 500);  // a crash left it short
  std::string out;
  EXPECT_FALSE(cache->Get(9, &out));
  EXPECT_FALSE(cache->Get(10, &out));
  EXPECT_EQ(cache->stats().corrupt, 2u);
  EXPECT_FALSE(cache->Contains(9));
  EXPECT_FALSE(std::filesystem::exists(cache->EntryPath(9)));
  // What they counted is no longer counted, exactly: nothing is left.
  EXPECT_EQ(cache->stats().usage_bytes, 0);
  // Fetched again and written again.
  EXPECT_TRUE(cache->Put(9, SampleFileBytes(9)));
  EXPECT_TRUE(cache->Get(9, &out));
  EXPECT_EQ(out, SampleFileBytes(9));
}

TEST(DiskSampleCacheTest, TheBoundHoldsAcrossProcessesSharingTheFolder) {
  const std::string dir = testing::MakeTempDir("disk_cache_bound");
  // Two openers of one folder (two ranks of a node): room for 3 entries.
  std::unique_ptr<DiskSampleCache> a = Open(Options(dir, 3));
  std::unique_ptr<DiskSampleCache> b = Open(Options(dir, 3));
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->Put(1, SampleFileBytes(1)));
  EXPECT_TRUE(b->Put(2, SampleFileBytes(2)));
  EXPECT_TRUE(b->Put(1, SampleFileBytes(1))) << "written by the other: there already";
  EXPECT_TRUE(a->Put(3, SampleFileBytes(3)));
  EXPECT_FALSE(b->Put(4, SampleFileBytes(4)));
  EXPECT_EQ(b->stats().rejected, 1u);
  std::string out;
  EXPECT_TRUE(b->Get(3, &out)) << "an entry the other wrote";
  EXPECT_EQ(out, SampleFileBytes(3));
  int64_t on_disk = 0;
  for (uint64_t id : {1, 2, 3, 4}) {
    if (std::filesystem::exists(a->EntryPath(id))) {
      on_disk += static_cast<int64_t>(std::filesystem::file_size(a->EntryPath(id)));
    }
  }
  EXPECT_EQ(on_disk, 3 * (1000 + DiskSampleCache::kHeaderBytes));
}

int64_t EntryBytes(int n) { return n * (1000 + DiskSampleCache::kHeaderBytes); }

// A path that holds no entry of ours is dropped without reading it whole: a
// sparse 30 GiB file (read whole, a bad_alloc), a FIFO (read, a hang), a
// link, a file of another size than its header says. The counters stay exact
// and the samples are written again.
TEST(DiskSampleCacheTest, WhatIsNotAnEntryIsDroppedWithoutReadingIt) {
  const std::string dir = testing::MakeTempDir("disk_cache_not_entries");
  std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
  ASSERT_TRUE(cache);
  for (uint64_t id : {1, 2, 3, 4, 5}) ASSERT_TRUE(cache->Put(id, SampleFileBytes(id)));
  std::filesystem::remove(cache->EntryPath(1));
  std::filesystem::remove(cache->EntryPath(2));
  std::filesystem::remove(cache->EntryPath(3));
  {
    std::ofstream huge(cache->EntryPath(1));
  }
  std::filesystem::resize_file(cache->EntryPath(1), int64_t{30} << 30);  // sparse
  ASSERT_EQ(mkfifo(cache->EntryPath(2).c_str(), 0600), 0);
  std::filesystem::create_symlink(cache->EntryPath(5), cache->EntryPath(3));
  std::filesystem::resize_file(cache->EntryPath(4), 1000);  // short of its header's size
  std::string out;
  for (uint64_t id : {1, 2, 3, 4}) {
    EXPECT_FALSE(cache->Get(id, &out)) << id;
    EXPECT_TRUE(out.empty()) << id;
    std::error_code ec;
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(cache->EntryPath(id))))
        << id;
  }
  EXPECT_EQ(cache->stats().corrupt, 4u);
  EXPECT_TRUE(cache->Get(5, &out)) << "the link's target is intact";
  // Entries 1 to 3 were removed by hand first (still counted: 3 entries); 4
  // was counted as written. What is left counted: 1, 2, 3 (gone by hand) and 5.
  EXPECT_EQ(cache->stats().usage_bytes, EntryBytes(4));
  // A process that opens the folder alone counts it again from its files.
  cache.reset();
  cache = Open(Options(dir, 10));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->stats().usage_bytes, EntryBytes(1));
  for (uint64_t id : {1, 2, 3, 4}) {
    EXPECT_TRUE(cache->Put(id, SampleFileBytes(id))) << id;
    EXPECT_TRUE(cache->Get(id, &out)) << id;
    EXPECT_EQ(out, SampleFileBytes(id));
  }
  EXPECT_EQ(cache->stats().usage_bytes, EntryBytes(5));
}

// Opened alone, the folder is counted again: a count that a process killed
// between counting and writing left too high is exact again, and what such a
// process left (a FIFO, a file of the wrong size, temporary files) is gone.
TEST(DiskSampleCacheTest, OpenedAloneTheFolderIsCountedAgain) {
  const std::string dir = testing::MakeTempDir("disk_cache_recount");
  {
    std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
    ASSERT_TRUE(cache && cache->Put(1, SampleFileBytes(1)) && cache->Put(2, SampleFileBytes(2)));
    testing::WriteFile(cache->EntryPath(3) + ".tmp.AbCdEf", std::string(700, 'x'));
    ASSERT_EQ(mkfifo(cache->EntryPath(4).c_str(), 0600), 0);
  }
  // A killed writer's reservation: the counters say more than the files.
  for (const std::string& counter : {dir + "/usage", dir + "/000000000000002a/usage"}) {
    std::fstream usage(counter, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(usage) << counter;
    const int64_t inflated = EntryBytes(7);
    usage.write(reinterpret_cast<const char*>(&inflated), sizeof(inflated));
  }
  std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->stats().usage_bytes, EntryBytes(2));
  std::vector<std::string> left;
  for (const auto& bucket : std::filesystem::directory_iterator(cache->folder())) {
    if (!bucket.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(bucket)) {
      left.push_back(f.path().filename().string());
    }
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"1", "2"}));
}

// Eight processes of a node (eight ranks) fill one folder with the same
// samples at once: one copy of each on disk, counted once each (up to the
// entries two of them wrote at the same instant, counted twice until the
// next lone open), and every process reads every sample.
TEST(DiskSampleCacheTest, EightProcessesKeepOneCopy) {
  const std::string dir = testing::MakeTempDir("disk_cache_eight");
  DiskSampleCacheOptions options = Options(dir, 100);
  options.max_bytes = int64_t{1} << 30;
  std::vector<pid_t> children;
  for (int rank = 0; rank < 8; ++rank) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      absl::StatusOr<std::unique_ptr<DiskSampleCache>> cache = DiskSampleCache::Open(options);
      if (!cache.ok()) _exit(3);
      for (uint64_t i = 0; i < 100; ++i) {
        const uint64_t id = (i + 13 * rank) % 100;  // each starts elsewhere
        if (!(*cache)->Put(id, SampleFileBytes(id, 5000))) _exit(4);
      }
      std::string out;
      for (uint64_t id = 0; id < 100; ++id) {
        if (!(*cache)->Get(id, &out) || out != SampleFileBytes(id, 5000)) _exit(5);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  int files = 0;
  int64_t on_disk = 0;
  std::unique_ptr<DiskSampleCache> cache = Open(options);  // alone: counted again
  ASSERT_TRUE(cache);
  for (const auto& bucket : std::filesystem::directory_iterator(cache->folder())) {
    if (!bucket.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(bucket)) {
      ++files;
      on_disk += static_cast<int64_t>(std::filesystem::file_size(f.path()));
    }
  }
  EXPECT_EQ(files, 100);
  EXPECT_EQ(on_disk, 100 * (5000 + DiskSampleCache::kHeaderBytes));
  EXPECT_EQ(cache->stats().usage_bytes, on_disk);
}

// A planner in one process sees what another process of the node wrote.
TEST(DiskSampleCacheTest, AnotherProcesssEntriesAreSeen) {
  const std::string dir = testing::MakeTempDir("disk_cache_contains");
  std::unique_ptr<DiskSampleCache> rank0 = Open(Options(dir, 10));
  std::unique_ptr<DiskSampleCache> rank1 = Open(Options(dir, 10));
  ASSERT_TRUE(rank0 && rank1);
  EXPECT_FALSE(rank1->Contains(6));
  ASSERT_TRUE(rank0->Put(6, SampleFileBytes(6)));
  EXPECT_TRUE(rank1->Contains(6));
}

// The bound covers every dataset's folder: opening a dataset that needs room
// reclaims the folders of datasets opened longest ago, never one in use.
TEST(DiskSampleCacheTest, OlderDatasetsAreReclaimedWithinTheBound) {
  const std::string dir = testing::MakeTempDir("disk_cache_reclaim");
  std::string old_folder, used_folder;
  {
    std::unique_ptr<DiskSampleCache> old = Open(Options(dir, 10, /*fingerprint=*/1));
    ASSERT_TRUE(old);
    for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(old->Put(id, SampleFileBytes(id)));
    old_folder = old->folder();
  }
  std::unique_ptr<DiskSampleCache> used = Open(Options(dir, 10, /*fingerprint=*/2));
  ASSERT_TRUE(used);
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(used->Put(id, SampleFileBytes(id)));
  used_folder = used->folder();
  EXPECT_EQ(used->stats().usage_bytes, EntryBytes(8));

  // A third dataset of 5 entries: the bound (10) needs 3 more entries' room.
  DiskSampleCacheOptions third = Options(dir, 10, /*fingerprint=*/3);
  third.dataset_bytes = EntryBytes(5);
  std::unique_ptr<DiskSampleCache> cache = Open(third);
  ASSERT_TRUE(cache);
  EXPECT_FALSE(std::filesystem::exists(old_folder)) << "opened longest ago, not in use";
  EXPECT_TRUE(std::filesystem::exists(used_folder)) << "in use by another job";
  EXPECT_EQ(cache->stats().reclaimed_datasets, 1u);
  EXPECT_EQ(cache->stats().usage_bytes, EntryBytes(4));
  for (uint64_t id = 0; id < 6; ++id) EXPECT_TRUE(cache->Put(id, SampleFileBytes(id))) << id;
  EXPECT_FALSE(cache->Put(6, SampleFileBytes(6))) << "the bound holds for the whole folder";
  std::string out;
  EXPECT_TRUE(used->Get(3, &out)) << "the dataset in use kept its entries";
}

// Runs `body` in a child process with a tmpfs of `size` mounted at `dir`
// (a mount namespace of its own, so nothing stays mounted) and returns its
// exit code: 77 when this machine cannot mount one (neither root nor user
// namespaces).
template <typename Body>
int InTmpfs(const std::string& dir, const char* size, Body body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) _exit(77);
    mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
    const std::string options = std::string("size=") + size;
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) _exit(77);
    _exit(body());
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// On tmpfs the folder is memory: it goes with the last process that has it
// open, not before.
TEST(DiskSampleCacheTest, OnTmpfsTheLastUserRemovesTheFolder) {
  const std::string dir = testing::MakeTempDir("disk_cache_tmpfs");
  const int code = InTmpfs(dir, "1m", [&] {
    std::string folder;
    {
      absl::StatusOr<std::unique_ptr<DiskSampleCache>> a = DiskSampleCache::Open(Options(dir, 10));
      absl::StatusOr<std::unique_ptr<DiskSampleCache>> b = DiskSampleCache::Open(Options(dir, 10));
      if (!a.ok() || !b.ok() || !(*a)->Put(1, SampleFileBytes(1))) return 3;
      folder = (*a)->folder();
      a->reset();
      std::string out;
      if (!std::filesystem::exists(folder) || !(*b)->Get(1, &out)) return 4;  // b still uses it
    }
    if (std::filesystem::exists(folder)) return 5;
    absl::StatusOr<std::unique_ptr<DiskSampleCache>> again = DiskSampleCache::Open(Options(dir, 10));
    return again.ok() && (*again)->stats().usage_bytes == 0 ? 0 : 6;
  });
  if (code == 77) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(code, 0);
}

// A disk that fills up (a 64 KiB tmpfs) stops the filling at the first failed
// write: no write is tried again, the room is 0, and what was written is
// served. Runs in a child process with a mount namespace of its own.
TEST(DiskSampleCacheTest, AFullDiskStopsTheFilling) {
  const std::string dir = testing::MakeTempDir("disk_cache_full");
  const int code = InTmpfs(dir, "64k", [&] {
    absl::StatusOr<std::unique_ptr<DiskSampleCache>> cache =
        DiskSampleCache::Open(Options(dir, 1000));
    if (!cache.ok()) return 3;
    int written = 0;
    for (uint64_t id = 0; id < 100; ++id) written += (*cache)->Put(id, SampleFileBytes(id));
    const DiskSampleCacheStats stats = (*cache)->stats();
    std::string out;
    const bool serves = written > 0 && (*cache)->Get(0, &out) && out == SampleFileBytes(0);
    std::fprintf(stderr, "written %d, write errors %llu, rejected %llu, room %lld\n", written,
                 static_cast<unsigned long long>(stats.write_errors),
                 static_cast<unsigned long long>(stats.rejected),
                 static_cast<long long>((*cache)->RoomBytes()));
    const bool ok = written > 0 && written < 100 && stats.write_errors == 1 &&
                    stats.rejected == static_cast<uint64_t>(100 - written) &&
                    (*cache)->RoomBytes() == 0 && serves;
    return ok ? 0 : 1;
  });
  if (code == 77) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(code, 0);
}

// Killed with SIGKILL while writing entries or while holding the node's lock,
// a process wedges nobody: the others write and read on, and the next process
// that opens the folder alone finds exactly the entries on disk counted.
TEST(DiskSampleCacheTest, AProcessKilledMidWriteOrHoldingTheLockWedgesNobody) {
  const std::string dir = testing::MakeTempDir("disk_cache_sigkill");
  DiskSampleCacheOptions options = Options(dir, 100);
  options.max_bytes = int64_t{1} << 30;
  for (int round = 0; round < 4; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      absl::StatusOr<std::unique_ptr<DiskSampleCache>> cache = DiskSampleCache::Open(options);
      if (!cache.ok()) _exit(3);
      if (round == 3) {  // dies holding the node's lock
        absl::StatusOr<FileLock> lock = FileLock::Acquire(dir + "/usage");
        raise(SIGKILL);
      }
      for (uint64_t id = 0;; id = (id + 1) % 100) {
        (*cache)->Put(id, SampleFileBytes(id, 200000));  // 100 ids, the bound well above
      }
    }
    usleep(20000 + 30000 * round);
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
  }
  std::unique_ptr<DiskSampleCache> cache = Open(options);
  ASSERT_TRUE(cache);
  int64_t on_disk = 0;
  for (const auto& bucket : std::filesystem::directory_iterator(cache->folder())) {
    if (!bucket.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(bucket)) {
      EXPECT_EQ(f.path().filename().string().find('.'), std::string::npos) << f.path();
      on_disk += static_cast<int64_t>(std::filesystem::file_size(f.path()));
    }
  }
  EXPECT_EQ(cache->stats().usage_bytes, on_disk);
  std::string out;
  for (uint64_t id = 0; id < 100; ++id) {
    if (cache->Contains(id)) {
      EXPECT_TRUE(cache->Get(id, &out)) << id;
      EXPECT_EQ(out, SampleFileBytes(id, 200000)) << id;
    }
  }
  EXPECT_TRUE(cache->Put(99, SampleFileBytes(99, 200000)));
}

TEST(DiskSampleCacheTest, OptionsAreCheckedByName) {
  DiskSampleCacheOptions options;
  options.max_bytes = 1;
  EXPECT_NE(options.Validate().message().find("DiskSampleCacheOptions.dir"), std::string::npos);
  options.dir = "/tmp";
  options.max_bytes = 0;
  EXPECT_NE(options.Validate().message().find("max_bytes"), std::string::npos);
  options.dir = "/proc/no-such-folder";
  options.max_bytes = 1000;
  absl::StatusOr<std::unique_ptr<DiskSampleCache>> bad = DiskSampleCache::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/proc/no-such-folder"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace sophon
