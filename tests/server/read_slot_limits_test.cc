// Fetch streams that announce a request message and never finish it, on a
// real server on 127.0.0.1:0 with a small transport quota: an attacker from
// 127.0.0.2 (a raw HTTP/2 client, tools/bench/h2_raw) opens many of them
// while a well-behaved client from 127.0.0.1 fetches every sample over
// several requests. gRPC grows a stream's window to the announced message
// only while the service has a read pending on it, so read slots bound what
// the attack pins: the good client's stream is never reset and the server's
// resident memory grows by a few MiB, not by the announced bytes.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/loader/sample_client.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/base/process_status.h"
#include "sophon/net/wire.h"
#include "tests/test_util.h"
#include "spdlog/spdlog.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

constexpr int kSamples = 24;
constexpr int kAttackConnections = 4;
constexpr int kAttackStreams = 96;                // 24 per connection
constexpr uint32_t kAnnouncedBytes = 1u << 20;    // each stream's unfinished message
constexpr int64_t kQuotaBytes = int64_t{32} << 20;

// The attack: kAttackStreams Fetch streams from 127.0.0.2, each announcing a
// message of kAnnouncedBytes and sending all of it but its last byte as the
// server's windows allow; then it holds them (answering pings) until stopped.
// It keeps account of the bytes it has sent on streams the server has not
// ended: what the server holds of their unfinished messages.
class HalfSentAttack {
 public:
  explicit HalfSentAttack(int port) : port_(port) {}
  ~HalfSentAttack() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // Waits until the server's windows let no more bytes through for 500 ms
  // (or `timeout`).
  bool WaitSettled(absl::Duration timeout) {
    return settled_.WaitForNotificationWithTimeout(timeout);
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // The most bytes of unfinished messages on open streams at any time.
  uint64_t peak_held_bytes() const { return peak_held_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t streams_ended_by_server() const { return ended_.load(); }

 private:
  void Run() {
    const std::string message = H2RawConnection::GrpcPrefix(kAnnouncedBytes) +
                                std::string(kAnnouncedBytes - 1, '\0');
    std::vector<std::unique_ptr<H2RawConnection>> conns;
    for (int i = 0; i < kAttackConnections; ++i) {
      H2RawOptions o;
      o.port = port_;
      o.source_address = "127.0.0.2";
      absl::StatusOr<std::unique_ptr<H2RawConnection>> c = H2RawConnection::Connect(o);
      if (!c.ok()) {
        ADD_FAILURE() << c.status();
        settled_.Notify();
        return;
      }
      conns.push_back(*std::move(c));
    }
    struct Out {
      H2RawConnection* conn;
      uint32_t stream;
      size_t sent = 0;
    };
    std::vector<Out> out;
    for (int s = 0; s < kAttackStreams; ++s) {
      H2RawConnection* c = conns[static_cast<size_t>(s) % conns.size()].get();
      out.push_back({c, c->StartCall("/sophon.v1.SampleService/Fetch", false)});
    }
    absl::Time last_progress = absl::Now();
    while (!stop_.load()) {
      bool progress = false;
      uint64_t held = 0;
      for (Out& m : out) {
        if (!m.conn->IsOpen(m.stream)) continue;
        if (m.sent < message.size() && m.conn->queued_bytes() < (1u << 20)) {
          const size_t n = m.conn->SendData(m.stream, absl::string_view(message).substr(m.sent),
                                            false);
          m.sent += n;
          progress |= n > 0;
        }
        held += m.sent;
      }
      uint64_t sent = 0, ended = 0;
      for (auto& c : conns) {
        if (!c->closed()) (void)c->Pump(progress ? absl::ZeroDuration() : absl::Milliseconds(5));
        sent += c->counters().data_bytes_sent;
        ended += c->counters().streams_reset_by_peer + c->counters().streams_ended_by_peer;
      }
      bytes_sent_.store(sent);
      ended_.store(ended);
      if (held > peak_held_.load()) peak_held_.store(held);
      if (progress) last_progress = absl::Now();
      if (absl::Now() - last_progress > absl::Milliseconds(500) && !settled_.HasBeenNotified()) {
        settled_.Notify();
      }
    }
    if (!settled_.HasBeenNotified()) settled_.Notify();
  }

  const int port_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_held_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> ended_{0};
  absl::Notification settled_;
};

v1::FetchRequest Request(int first, int count) {
  v1::FetchRequest request;
  AugmentOptions aug;
  aug.crop_size = 32;
  *request.mutable_augment() = ToProto(aug);
  for (int id = first; id < first + count; ++id) {
    v1::SampleRequest* s = request.add_samples();
    s->set_id(static_cast<uint64_t>(id));
    s->set_target_stage(StageToProto(Stage::kCropped));
  }
  return request;
}

TEST(ReadSlotLimitsTest, ReadSlotsBoundWhatUnfinishedRequestsPinAndTheGoodClientIsServed) {
  testing::TestDatasetOptions d;
  d.classes = 1;
  d.per_class = kSamples;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("read_slot_limits", d);
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.service.transport_memory_bytes = kQuotaBytes;
  options.service.max_request_bytes = 64 << 10;
  options.service.max_reading_streams_per_peer = 4;
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  // The good client's connection is the server's oldest: the one gRPC's
  // reclaimers pick first under memory pressure.
  auto stub = v1::SampleService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  FetchCall call(stub.get());
  std::map<uint64_t, v1::Sample> got;
  auto fetch = [&](int first, int count) {
    if (!call.Write(Request(first, count))) return false;
    v1::FetchResponse response;
    while (static_cast<int>(got.size()) < first + count && call.Read(&response)) {
      for (const v1::Sample& s : response.samples()) got[s.id()] = s;
    }
    return static_cast<int>(got.size()) == first + count;
  };
  ASSERT_TRUE(fetch(0, 4));
  const uint64_t rss_before = ResidentBytes();

  HalfSentAttack attack((*server)->port());
  attack.Start();
  attack.WaitSettled(absl::Seconds(10));
  const uint64_t rss_attacked = ResidentBytes();

  // Every other sample, in several requests, while the attack holds.
  bool all = true;
  for (int first = 4; first < kSamples && all; first += 4) all = fetch(first, 4);
  call.WritesDone();
  v1::FetchResponse response;
  while (call.Read(&response)) {
    for (const v1::Sample& s : response.samples()) got[s.id()] = s;
  }
  const absl::Status status = call.Finish();
  attack.Stop();

  EXPECT_TRUE(status.ok()) << "the good client's stream: " << status;
  EXPECT_TRUE(all);
  EXPECT_EQ(got.size(), static_cast<size_t>(kSamples));
  for (const auto& [id, s] : got) {
    EXPECT_EQ(s.error_code(), 0) << "sample " << id << ": " << s.error_message();
  }
  // What the attack got into the server at once: its 4 read slots' messages
  // and every other stream's 16 KiB window (about 5.5 MiB), not the 96 MiB
  // it announced.
  const uint64_t peak = attack.peak_held_bytes();
  EXPECT_LT(peak, uint64_t{8} << 20) << "bytes of unfinished messages the server took in";
  const int64_t grown = static_cast<int64_t>(rss_attacked) - static_cast<int64_t>(rss_before);
  EXPECT_LT(grown, int64_t{32} << 20) << "the server's resident memory grew by " << grown;
  ::testing::Test::RecordProperty("attack_peak_held_bytes", std::to_string(peak));
  ::testing::Test::RecordProperty("server_rss_growth_bytes", std::to_string(grown));
  spdlog::info("the attack held at most {:.1f} MB of unfinished messages ({:.1f} MB sent, {} "
               "streams ended by the server); the server's RSS grew {:.1f} MB",
               peak / 1e6, attack.bytes_sent() / 1e6, attack.streams_ended_by_server(),
               grown / 1e6);
}

// A server whose clock is the test's: time passes only when the test says so,
// and the reaper decisions below are made at times the test chose.
class ReadStallTest : public ::testing::Test {
 protected:
  void Start(ServiceOptions service) {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 4;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("read_stall", d);
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    service.clock = [this] {
      absl::MutexLock lock(&clock_mu_);
      return now_;
    };
    options.service = service;
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::SampleService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }
  // Advances the clock by `d` and runs a reaper pass at the new time.
  void Reap(absl::Duration d) {
    absl::Time now;
    {
      absl::MutexLock lock(&clock_mu_);
      now = now_ += d;
    }
    server_->service()->registry().CheckAll(now);
  }
  ReadSlots& slots() { return server_->service()->read_slots(); }
  // Waits (up to 10 s) until `done` holds.
  static bool WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 5000; ++i) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return done();
  }
  uint64_t Refused(const std::string& limit) {
    v1::ServerStats stats;
    EXPECT_TRUE(server_->service()->GetStats({}, &stats).ok());
    auto it = stats.rejections_by_limit().find(limit);
    return it == stats.rejections_by_limit().end() ? 0 : it->second;
  }
  // Samples the server has accepted from requests so far (in flight or sent).
  uint64_t SamplesAccepted() {
    v1::ServerStats stats;
    EXPECT_TRUE(server_->service()->GetStats({}, &stats).ok());
    uint64_t sent = 0;
    for (uint64_t n : stats.samples_by_stage()) sent += n;
    return sent + stats.samples_failed() + stats.inflight_samples();
  }
  // Sends one request for `ids` and reads their samples.
  static bool Fetch(FetchCall& call, int first, int count) {
    if (!call.Write(Request(first, count))) return false;
    int got = 0;
    v1::FetchResponse response;
    while (got < count && call.Read(&response)) got += response.samples_size();
    return got == count;
  }

  absl::Mutex clock_mu_;
  absl::Time now_ ABSL_GUARDED_BY(clock_mu_) = absl::FromUnixSeconds(1'000'000);
  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<v1::SampleService::Stub> stub_;
};

constexpr char kLocal[] = "ipv4:127.0.0.1";

TEST_F(ReadStallTest, AStreamThatSendsNoRequestGivesItsSlotToOneThatWaits) {
  ServiceOptions o;
  o.max_reading_streams_per_peer = 1;
  Start(o);
  FetchCall quiet(stub_.get());  // holds the slot, sends nothing
  ASSERT_TRUE(WaitFor([&] { return slots().peer_held(kLocal) == 1; }));
  FetchCall eager(stub_.get());
  ASSERT_TRUE(eager.Write(Request(0, 2)));  // not read: no slot
  ASSERT_TRUE(WaitFor([&] { return slots().peer_waiting(kLocal) == 1; }));
  Reap(absl::Milliseconds(900));  // within the first request's second
  EXPECT_EQ(Refused("read_stall_timeout"), 0u);
  Reap(absl::Milliseconds(200));
  v1::FetchResponse r;
  EXPECT_FALSE(quiet.Read(&r));
  const absl::Status s = quiet.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("read_stall_timeout"), std::string::npos) << s;
  EXPECT_NE(s.message().find("first request"), std::string::npos) << s;
  EXPECT_EQ(Refused("read_stall_timeout"), 1u);
  // The waiter got the slot and is served.
  int got = 0;
  while (got < 2 && eager.Read(&r)) got += r.samples_size();
  EXPECT_EQ(got, 2);
  eager.WritesDone();
  EXPECT_FALSE(eager.Read(&r));
  EXPECT_TRUE(eager.Finish().ok());
  // Every slot and place in the queue came back.
  EXPECT_TRUE(WaitFor([&] { return slots().held() == 0 && slots().waiters() == 0; }));
}

TEST_F(ReadStallTest, AStreamThatPausesKeepsItsSlotUntilAnotherWaitsForIt) {
  ServiceOptions o;
  o.max_reading_streams_per_peer = 1;
  o.read_stall_timeout = absl::Seconds(5);
  o.idle_stream_timeout = absl::Hours(1);
  Start(o);
  FetchCall trainer(stub_.get());
  ASSERT_TRUE(Fetch(trainer, 0, 2));
  Reap(absl::Minutes(1));  // far past the stall limit, but nobody waits
  EXPECT_EQ(Refused("read_stall_timeout"), 0u);
  ASSERT_TRUE(Fetch(trainer, 2, 2));
  FetchCall other(stub_.get());
  ASSERT_TRUE(WaitFor([&] { return slots().peer_waiting(kLocal) == 1; }));
  Reap(absl::Seconds(4));  // its read has waited 4 s: under the limit
  EXPECT_EQ(Refused("read_stall_timeout"), 0u);
  Reap(absl::Seconds(2));
  v1::FetchResponse r;
  EXPECT_FALSE(trainer.Read(&r));
  const absl::Status s = trainer.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("read_stall_timeout limit (5s)"), std::string::npos) << s;
  ASSERT_TRUE(WaitFor([&] { return slots().peer_waiting(kLocal) == 0; }));
  EXPECT_TRUE(Fetch(other, 0, 1)) << "the waiter got the slot";
  other.Cancel();
  EXPECT_TRUE(WaitFor([&] { return slots().held() == 0 && slots().waiters() == 0; }));
}

TEST_F(ReadStallTest, AStreamThatHalfClosesGivesItsSlotBackWhileItsSamplesAreSent) {
  ServiceOptions o;
  o.max_reading_streams_per_peer = 1;
  Start(o);
  FetchCall first(stub_.get());
  ASSERT_TRUE(first.Write(Request(0, 4)));
  ASSERT_TRUE(first.WritesDone());
  // Its read ended with the half-close: the slot goes to the next stream
  // even before the first one's samples are taken. (Held by nobody is not
  // enough: that is also so before the server has seen the stream, and the
  // second stream would then take the slot first and keep it.)
  ASSERT_TRUE(WaitFor([&] { return SamplesAccepted() > 0 && slots().held() == 0; }));
  FetchCall second(stub_.get());
  EXPECT_TRUE(Fetch(second, 0, 1));
  v1::FetchResponse r;
  int got = 0;
  while (first.Read(&r)) got += r.samples_size();
  EXPECT_EQ(got, 4);
  EXPECT_TRUE(first.Finish().ok());
  second.Cancel();
  EXPECT_TRUE(WaitFor([&] { return slots().held() == 0 && slots().waiters() == 0; }));
}

TEST_F(ReadStallTest, ADrainingServerGivesBackEverySlotAndPlaceInTheQueue) {
  ServiceOptions o;
  o.max_reading_streams_per_peer = 1;
  Start(o);
  FetchCall holder(stub_.get());
  ASSERT_TRUE(Fetch(holder, 0, 1));
  FetchCall waiter(stub_.get());
  ASSERT_TRUE(waiter.Write(Request(1, 1)));
  ASSERT_TRUE(WaitFor([&] { return slots().peer_waiting(kLocal) == 1; }));
  server_->Drain();
  EXPECT_EQ(slots().held(), 0);
  EXPECT_EQ(slots().waiters(), 0);
  v1::FetchResponse r;
  EXPECT_FALSE(holder.Read(&r));
  EXPECT_FALSE(waiter.Read(&r));
  EXPECT_EQ(holder.Finish().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(waiter.Finish().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sophon
