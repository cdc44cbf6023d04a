// The Loader's face from several threads (client/loader/loader.h, "Threads"),
// against a real storage server on 127.0.0.1 (port 0): while one thread
// iterates, another thread's StartEpoch is refused with FAILED_PRECONDITION
// (or, between two of its Next calls, restarts the epoch under it), its Stop
// wakes a waiting Next with CANCELLED, and stats and the epoch's figures are
// served; many rounds of these, two StartEpochs at once among them (what a
// Python prefetch thread did: a crash in pthread_join, or a hang), end with no
// crash and no hang, each call with one of the documented outcomes.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kSamples = 24;  // 2 classes x 12
constexpr int kBatch = 4;     // 6 batches an epoch

// Plans every sample at TENSOR (the server does the work), but holds the
// sender's first Plan of the epoch until released (or 20 s, so a failure
// cannot hang the test): the epoch's first Next waits meanwhile.
class GatedPolicy final : public OffloadPolicy {
 public:
  std::string name() const override { return "gated"; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t>, absl::Span<SampleAssignment> out) override {
    released_.WaitForNotificationWithTimeout(absl::Seconds(20));
    for (SampleAssignment& a : out) {
      a = SampleAssignment{Stage::kTensor, SampleAssignment::kAnyServer};
    }
  }
  void Release() { released_.Notify(); }

 private:
  absl::Notification released_;
};

// What a thread's calls returned, read by the test thread after joining.
struct Outcome {
  int batches = 0;
  std::vector<uint64_t> ids;
  absl::Status end;  // OK: Next returned false
};

// Next until false or an error.
Outcome Iterate(Loader* loader) {
  Outcome out;
  Batch batch;
  while (true) {
    absl::StatusOr<bool> more = loader->Next(&batch);
    if (!more.ok()) {
      out.end = more.status();
      return out;
    }
    if (!*more) return out;
    ++out.batches;
    out.ids.insert(out.ids.end(), batch.ids.begin(), batch.ids.end());
  }
}

class LoaderThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = kSamples / 2;
    dopts.min_side = 64;
    dopts.max_side = 96;
    ServiceOptions service;
    service.prep_workers = 2;
    absl::StatusOr<testing::LocalServer> local = testing::StartLocalServer(
        testing::MakeTestDataset("loader_threads", dopts), std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
    options_.batch_size = kBatch;
    options_.workers = 1;
    options_.prefetch_batches = 2;
    options_.pipeline.augment.crop_size = 24;
  }

  std::unique_ptr<Loader> MakeLoader(OffloadPolicy* policy) {
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options_, policy);
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }

  LoaderOptions options_;
  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

bool IsEveryIdOnce(std::vector<uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  if (ids.size() != static_cast<size_t>(kSamples)) return false;
  for (int i = 0; i < kSamples; ++i) {
    if (ids[i] != static_cast<uint64_t>(i)) return false;
  }
  return true;
}

TEST_F(LoaderThreadsTest, StartEpochWhileAnotherThreadWaitsIsRefusedAndStopWakesIt) {
  GatedPolicy policy;
  std::unique_ptr<Loader> loader = MakeLoader(&policy);
  ASSERT_NE(loader, nullptr);
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  Outcome a;
  absl::Notification a_done;
  std::thread iterating([&] {
    a = Iterate(loader.get());  // waits: the gate holds the epoch's first batch
    a_done.Notify();
  });
  // Thread A has nothing to do but enter Next.
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_FALSE(a_done.HasBeenNotified()) << a.end;

  const absl::Status second = loader->StartEpoch(1);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("iterated by another thread"), std::string::npos) << second;
  EXPECT_NE(second.message().find("one iteration at a time"), std::string::npos) << second;
  // The refused call left epoch 0 alone, and the state calls are served.
  EXPECT_EQ(loader->num_batches(), kSamples / kBatch);
  EXPECT_EQ(loader->epoch_samples(), kSamples);
  EXPECT_EQ(loader->order().size(), static_cast<size_t>(kSamples));
  EXPECT_EQ(loader->stats().batches, 0u);
  EXPECT_FALSE(loader->WaitForNext(absl::Milliseconds(10)));
  EXPECT_FALSE(a_done.HasBeenNotified());

  // Stop from this thread: A's wait ends with CANCELLED at once, before Stop
  // has joined the sender (still held by the gate).
  std::thread stopper([&] { loader->Stop(); });
  EXPECT_TRUE(a_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  policy.Release();
  stopper.join();
  iterating.join();
  EXPECT_EQ(a.end.code(), absl::StatusCode::kCancelled) << a.end;
  EXPECT_EQ(a.end.message(), "loader stopped");
  EXPECT_EQ(a.batches, 0);

  // The loader is whole: the next epoch is served in full.
  ASSERT_TRUE(loader->StartEpoch(2).ok());
  const Outcome full = Iterate(loader.get());
  EXPECT_TRUE(full.end.ok()) << full.end;
  EXPECT_TRUE(IsEveryIdOnce(full.ids));
}

TEST_F(LoaderThreadsTest, ConcurrentStartEpochStopAndStatsNeverCrashOrHang) {
  FixedPolicy policy(Stage::kTensor, "alloff");
  std::unique_ptr<Loader> loader = MakeLoader(&policy);
  ASSERT_NE(loader, nullptr);
  constexpr int kRounds = 300;
  int refused = 0, restarted = 0, cancelled = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    ASSERT_TRUE(loader->StartEpoch(round).ok());
    Outcome a;
    std::atomic<bool> a_ended{false};
    absl::Mutex mu;
    std::vector<absl::Status> starts;  // the other threads' StartEpoch results
    absl::Notification all_done;  // every thread of the round joined
    const int kind = round % 4;
    std::thread iterating([&] {
      a = Iterate(loader.get());
      a_ended = true;
    });
    std::vector<std::thread> others;
    auto start = [&](uint64_t epoch) {
      absl::SleepFor(absl::Microseconds(200 * (round % 7)));
      const absl::Status s = loader->StartEpoch(epoch);
      absl::MutexLock lock(&mu);
      starts.push_back(s);
    };
    switch (kind) {
      case 0:  // a second iteration starts
        others.emplace_back(start, 1000 + round);
        break;
      case 1:  // two at once (the reported crash), and a Stop
        others.emplace_back(start, 1000 + round);
        others.emplace_back(start, 2000 + round);
        others.emplace_back([&] {
          absl::SleepFor(absl::Microseconds(300 * (round % 5)));
          loader->Stop();
        });
        break;
      case 2:  // Stop while A iterates
        others.emplace_back([&] {
          absl::SleepFor(absl::Microseconds(500 * (round % 5)));
          loader->Stop();
        });
        break;
      case 3:  // state calls only: A's epoch is untouched
        others.emplace_back([&] {
          while (!a_ended) {
            const LoaderEpochStats stats = loader->stats();
            EXPECT_LE(stats.samples, static_cast<uint64_t>(kSamples));
            EXPECT_EQ(loader->num_batches(), kSamples / kBatch);
            EXPECT_EQ(loader->epoch_samples(), kSamples);
            loader->WaitForNext(absl::Milliseconds(1));
          }
        });
        break;
    }
    // A watchdog instead of a hang: a call stuck past the deadline fails the
    // test and the process (the threads cannot be joined).
    std::thread watchdog([&] {
      if (!all_done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
        std::cerr << "round " << round << ": the threads did not end within 60 s\n";
        std::abort();
      }
    });
    for (std::thread& t : others) t.join();
    // A ran into the end of an epoch (its own or a restarted one) or into a
    // Stop; a StartEpoch that won after A's end leaves an epoch running,
    // which the next round's StartEpoch ends.
    iterating.join();
    all_done.Notify();
    watchdog.join();

    if (a.end.ok()) {
      if (kind == 3) {
        EXPECT_EQ(a.batches, kSamples / kBatch);
        EXPECT_TRUE(IsEveryIdOnce(a.ids));
      }
    } else {
      EXPECT_EQ(a.end.code(), absl::StatusCode::kCancelled) << a.end;
      EXPECT_EQ(a.end.message(), "loader stopped");
      EXPECT_NE(kind, 3) << a.end;
      ++cancelled;
    }
    for (const absl::Status& s : starts) {
      if (s.ok()) {
        ++restarted;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        EXPECT_NE(s.message().find("iterated by another thread"), std::string::npos) << s;
        ++refused;
      }
    }
  }
  std::cout << kRounds << " rounds: " << refused << " StartEpoch refused, " << restarted
            << " restarted the epoch, " << cancelled << " iterations ended by Stop\n";
  // After all that the loader still serves a whole epoch.
  ASSERT_TRUE(loader->StartEpoch(kRounds).ok());
  const Outcome full = Iterate(loader.get());
  EXPECT_TRUE(full.end.ok()) << full.end;
  EXPECT_TRUE(IsEveryIdOnce(full.ids));
}

}  // namespace
}  // namespace sophon
