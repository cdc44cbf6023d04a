// A hog from four client addresses (127.0.0.2-5) that asks for large tensors
// and never reads them, on a real server (gRPC on 127.0.0.1, port 0) with
// write_stall_timeout far beyond the test: a trainer whose stream was open
// before the hog came, and a client that connects after it filled what it
// could, each get their samples at once, not once the stall timeout ends the
// hog's streams.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/loader/sample_client.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/wire.h"
#include "tests/test_util.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

constexpr int kSamples = 8;
constexpr int64_t kBudgetBytes = int64_t{64} << 20;

v1::FetchRequest RawRequest() {
  FetchRequestBuilder builder(1, 1, AugmentOptions{.crop_size = 32});
  for (int id = 0; id < kSamples; ++id) builder.Add(id, Stage::kRaw);
  return builder.Take();
}

// Sends one request on `call` and reads its kSamples answers: true once all
// came, false if the stream ended first.
bool FetchAll(FetchCall* call) {
  if (!call->Write(RawRequest())) return false;
  int got = 0;
  v1::FetchResponse response;
  while (got < kSamples && call->Read(&response)) got += response.samples_size();
  return got == kSamples;
}

// Runs `fetch` on a thread and waits at most `timeout` for it: whether it
// finished in time. The thread is joined either way (the server's shutdown
// ends a stream still waiting).
class Timed {
 public:
  explicit Timed(std::function<bool()> fetch)
      : thread_([this, fetch = std::move(fetch)] {
          ok_ = fetch();
          done_.Notify();
        }) {}
  ~Timed() { thread_.join(); }
  bool DoneWithin(absl::Duration timeout) {
    return done_.WaitForNotificationWithTimeout(timeout) && ok_;
  }

 private:
  absl::Notification done_;
  bool ok_ = false;
  std::thread thread_;
};

TEST(HogShareTest, ClientsThatNeverReadDoNotHoldUpAnOpenTrainerOrALateClient) {
  testing::TestDatasetOptions d;
  d.classes = 1;
  d.per_class = kSamples;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("hog_share", d);
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.service.prep_workers = 2;
  options.service.inflight_budget_bytes = kBudgetBytes;
  options.service.max_stream_inflight_bytes = kBudgetBytes / 4;
  // Far beyond the test: only the fair shares can let the others through.
  options.service.write_stall_timeout = absl::Minutes(10);
  options.service.idle_stream_timeout = absl::Minutes(10);
  options.service.unread_connection_timeout = absl::Minutes(10);
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  // The trainer: a stream open, its first request served and read.
  ClientOptions copts;
  copts.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> trainer = SampleClient::Connect(copts);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::unique_ptr<FetchCall> trainer_call = (*trainer)->OpenFetch();
  ASSERT_TRUE(FetchAll(trainer_call.get()));

  // The hog: two streams from each of four addresses, each asking for 64
  // tensors of crop 512 (0.75 MiB each; 48 MiB a stream, of which 16 MiB
  // may be in flight) and granting the
  // server no byte of them.
  std::vector<std::unique_ptr<H2RawConnection>> hog;
  for (int a = 2; a <= 5; ++a) {
    H2RawOptions o;
    o.port = (*server)->port();
    o.source_address = "127.0.0." + std::to_string(a);
    o.receive_window = 0;
    o.read = false;
    absl::StatusOr<std::unique_ptr<H2RawConnection>> conn = H2RawConnection::Connect(o);
    ASSERT_TRUE(conn.ok()) << conn.status();
    FetchRequestBuilder builder(0, 1, AugmentOptions{.crop_size = 512});
    for (int i = 0; i < 64; ++i) builder.Add(i % kSamples, Stage::kTensor);
    const std::string bytes = builder.Take().SerializeAsString();
    for (int s = 0; s < 2; ++s) {
      const uint32_t stream = (*conn)->StartCall("/sophon.v1.SampleService/Fetch", false);
      (*conn)->SendData(
          stream, H2RawConnection::GrpcPrefix(static_cast<uint32_t>(bytes.size())) + bytes, false);
    }
    ASSERT_TRUE((*conn)->Flush(absl::Now() + absl::Seconds(5)));
    hog.push_back(*std::move(conn));
  }
  // The hog holds all it may once its use stops growing with its streams
  // waiting for more.
  ByteBudget& budget = (*server)->service()->budget();
  int64_t last = -1;
  for (int i = 0; i < 300; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    const int64_t used = budget.used();
    if (used == last && used > kBudgetBytes / 2 && budget.waiters() > 0) break;
    last = used;
  }
  ASSERT_GT(budget.used(), kBudgetBytes / 2) << "the hog never filled the budget";
  ASSERT_GT(budget.waiters(), 0);

  {
    Timed open_trainer([&] { return FetchAll(trainer_call.get()); });
    EXPECT_TRUE(open_trainer.DoneWithin(absl::Seconds(20)))
        << "the trainer's stream waited for the hog: " << budget.used() << " of " << kBudgetBytes
        << " bytes in use";
    std::unique_ptr<SampleClient> late;
    Timed late_client([&] {
      absl::StatusOr<std::unique_ptr<SampleClient>> c = SampleClient::Connect(copts);
      if (!c.ok()) return false;
      late = *std::move(c);
      std::unique_ptr<FetchCall> call = late->OpenFetch();
      const bool ok = FetchAll(call.get());
      call->WritesDone();
      return ok && call->Finish().ok();
    });
    EXPECT_TRUE(late_client.DoneWithin(absl::Seconds(20)))
        << "a client that came after the hog waited for it: " << budget.used() << " of "
        << kBudgetBytes << " bytes in use";
    // Ends whatever still waits, so that the threads can be joined.
    if (!open_trainer.DoneWithin(absl::ZeroDuration()) ||
        !late_client.DoneWithin(absl::ZeroDuration())) {
      (*server)->Shutdown(absl::ZeroDuration());
    }
  }
  trainer_call->WritesDone();
}

}  // namespace
}  // namespace sophon
