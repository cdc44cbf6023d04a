// Unary calls whose answers a client never takes, on a real server on
// 127.0.0.1:0: each client address holds at most max_unary_calls_per_peer of
// them, the rest wait unread for a slot (refused once they have waited
// unary_wait_timeout, or at once over max_waiting_unary_calls), and they are
// all let go when the client leaves. The client is a raw HTTP/2 connection
// (tools/bench/h2_raw) from 127.0.0.2 that grants the server no receive
// window.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_util.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

constexpr char kPeer[] = "ipv4:127.0.0.2";

class UnaryLimitsTest : public ::testing::Test {
 protected:
  void StartServer(int max_waiting = 16384, absl::Duration wait = absl::Seconds(1)) {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 2;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("unary_limits", d);
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    options.service.max_unary_calls_per_peer = 8;
    options.service.max_unary_calls = 16;
    options.service.max_waiting_unary_calls = max_waiting;
    options.service.unary_wait_timeout = wait;
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Calls GetStats from 127.0.0.1 with a real client; returns its status.
  grpc::Status Stats(absl::Duration deadline) {
    auto stub = v1::SampleService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    v1::ServerStats stats;
    return stub->GetStats(&context, v1::GetStatsRequest(), &stats);
  }

  // Starts `calls` GetStats calls on a new connection from `source` that
  // never lets the server send an answer's body (null if it cannot connect).
  std::unique_ptr<H2RawConnection> StartUnread(const char* source, int calls) {
    H2RawOptions o;
    o.port = server_->port();
    o.source_address = source;
    o.receive_window = 0;
    absl::StatusOr<std::unique_ptr<H2RawConnection>> conn = H2RawConnection::Connect(o);
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    const std::string empty_request = H2RawConnection::GrpcPrefix(0);
    for (int i = 0; i < calls; ++i) {
      const uint32_t stream = (*conn)->StartCall("/sophon.v1.SampleService/GetStats", false);
      (*conn)->SendData(stream, empty_request, /*end_stream=*/true);
    }
    return *std::move(conn);
  }

  // StartUnread from 127.0.0.2, then pumps the connection for a while.
  std::unique_ptr<H2RawConnection> Unread(int calls) {
    std::unique_ptr<H2RawConnection> conn = StartUnread("127.0.0.2", calls);
    if (conn == nullptr) return nullptr;
    const absl::Time until = absl::Now() + absl::Seconds(2);
    while (absl::Now() < until && conn->Pump(absl::Milliseconds(20)).ok()) {
    }
    return conn;
  }

  uint64_t Refused(const std::string& limit) {
    v1::ServerStats stats;
    EXPECT_TRUE(server_->service()->GetStats({}, &stats).ok());
    auto it = stats.rejections_by_limit().find(limit);
    return it == stats.rejections_by_limit().end() ? 0 : it->second;
  }

  std::unique_ptr<StorageServer> server_;
};

TEST_F(UnaryLimitsTest, AClientThatTakesNoAnswersHoldsAtMostItsShare) {
  StartServer(/*max_waiting=*/16384, /*wait=*/absl::Seconds(1));
  std::unique_ptr<H2RawConnection> conn = Unread(40);
  ASSERT_NE(conn, nullptr);
  UnaryCalls& calls = server_->service()->unary_calls();
  EXPECT_EQ(calls.inflight(kPeer), 8) << "the answers waiting for the client are capped";
  // The 32 over the cap waited their second, unread, and were refused.
  EXPECT_EQ(calls.waiting(), 0);
  EXPECT_EQ(Refused("max_unary_calls_per_peer"), 32u);
  // The refusals went out as trailers, which need no window: the client saw
  // 32 calls end while 8 wait for their answers' bodies.
  EXPECT_EQ(conn->counters().streams_ended_by_peer, 32u);
  EXPECT_EQ(conn->open_streams(), 8u);
  // Another client is answered meanwhile.
  EXPECT_TRUE(Stats(absl::Seconds(10)).ok());
  // The client leaves: every call it held is let go.
  conn.reset();
  for (int i = 0; i < 500 && calls.inflight() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(calls.inflight(), 0);
}

// The calls over the cap keep their streams while they wait: the client can
// send no more than its connection's slots allow, and the server has ended
// none of them (a refusal at once would free each stream for the next call).
TEST_F(UnaryLimitsTest, CallsOverTheCapWaitUnreadInTheirStreams) {
  StartServer(/*max_waiting=*/16384, /*wait=*/absl::Seconds(30));
  std::unique_ptr<H2RawConnection> conn = Unread(40);
  ASSERT_NE(conn, nullptr);
  UnaryCalls& calls = server_->service()->unary_calls();
  EXPECT_EQ(calls.inflight(kPeer), 8);
  EXPECT_EQ(calls.waiting(), 32);
  EXPECT_EQ(conn->counters().streams_ended_by_peer, 0u);
  EXPECT_EQ(conn->open_streams(), 40u);
  EXPECT_EQ(Refused("max_unary_calls_per_peer"), 0u);
  // The client leaves: the waiting calls go, unanswered, with the others.
  conn.reset();
  for (int i = 0; i < 500 && (calls.inflight() > 0 || calls.waiting() > 0); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(calls.inflight(), 0);
  EXPECT_EQ(calls.waiting(), 0);
}

// Over max_waiting_unary_calls a call is refused at once.
TEST_F(UnaryLimitsTest, CallsOverTheWaitingCapAreRefusedAtOnce) {
  StartServer(/*max_waiting=*/4, /*wait=*/absl::Seconds(30));
  std::unique_ptr<H2RawConnection> conn = Unread(40);
  ASSERT_NE(conn, nullptr);
  UnaryCalls& calls = server_->service()->unary_calls();
  EXPECT_EQ(calls.inflight(kPeer), 8);
  EXPECT_EQ(calls.waiting(), 4);
  EXPECT_EQ(Refused("max_unary_calls_per_peer"), 28u);
  EXPECT_EQ(conn->counters().streams_ended_by_peer, 28u);
}

// A call waiting for a slot of the server's is answered as soon as one
// frees: three addresses hold all 16 (8, then their shares), a fourth
// client's call waits, and is answered once the first leaves, before the
// others' waiting calls.
TEST_F(UnaryLimitsTest, AWaitingCallIsAnsweredWhenASlotFrees) {
  StartServer(/*max_waiting=*/16384, /*wait=*/absl::Seconds(30));
  std::unique_ptr<H2RawConnection> a = Unread(8);
  ASSERT_NE(a, nullptr);
  std::vector<std::unique_ptr<H2RawConnection>> others;
  UnaryCalls& calls = server_->service()->unary_calls();
  for (const char* source : {"127.0.0.3", "127.0.0.4"}) {
    std::unique_ptr<H2RawConnection> conn = StartUnread(source, 8);
    ASSERT_NE(conn, nullptr);
    const int want = calls.inflight() + 1;
    for (int i = 0; i < 200 && calls.inflight() < want; ++i) {
      (void)conn->Pump(absl::Milliseconds(10));
    }
    for (int i = 0; i < 20; ++i) (void)conn->Pump(absl::Milliseconds(10));
    others.push_back(std::move(conn));
  }
  ASSERT_EQ(calls.inflight(), 16);
  const int others_waiting = calls.waiting();  // what 127.0.0.3 and .4 asked past their shares
  grpc::Status answered;
  std::thread client([&] { answered = Stats(absl::Seconds(20)); });
  for (int i = 0; i < 500 && calls.waiting() == others_waiting; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(calls.waiting(), others_waiting + 1) << "the fourth client's call waits for a slot";
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time left = absl::Now();
  a.reset();  // its 8 calls end
  client.join();
  EXPECT_TRUE(answered.ok()) << answered.error_message();
  EXPECT_LT(absl::Now() - left, absl::Seconds(10));
  EXPECT_EQ(Refused("max_unary_calls"), 0u);
}

TEST_F(UnaryLimitsTest, TheServerWideCapHoldsAcrossAddresses) {
  StartServer(/*max_waiting=*/16384, /*wait=*/absl::Seconds(1));
  std::unique_ptr<H2RawConnection> a = Unread(8);
  ASSERT_NE(a, nullptr);
  std::vector<std::unique_ptr<H2RawConnection>> others;
  for (const char* source : {"127.0.0.3", "127.0.0.4"}) {
    others.push_back(StartUnread(source, 8));
    ASSERT_NE(others.back(), nullptr);
  }
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (absl::Now() < until) {
    for (auto& c : others) c->Pump(absl::Milliseconds(10)).IgnoreError();
    a->Pump(absl::Milliseconds(10)).IgnoreError();
  }
  EXPECT_EQ(server_->service()->unary_calls().inflight(), 16);
  // The third address's 8 waited their second for a slot, and were refused.
  EXPECT_EQ(Refused("max_unary_calls"), 8u);
}

}  // namespace
}  // namespace sophon
