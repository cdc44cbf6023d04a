// A client that never reads its socket, on a real server on 127.0.0.1:0: its
// connection is dropped unread_connection_timeout after the server's bytes
// stop moving (TCP_USER_TIMEOUT), long before the stream timeouts, and the
// budget it held goes back.
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/wire.h"
#include "tests/test_util.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

TEST(UnreadConnectionTest, AClientThatNeverReadsItsSocketIsDroppedAfterTheTimeout) {
  testing::TestDatasetOptions d;
  d.classes = 1;
  d.per_class = 8;
  StorageServerOptions options;
  options.data_dir = testing::MakeTestDataset("unread_connection", d);
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.service.unread_connection_timeout = absl::Seconds(1);
  // Far beyond the test: only the connection timeout can end the stream.
  options.service.idle_stream_timeout = absl::Minutes(10);
  options.service.write_stall_timeout = absl::Minutes(10);
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  H2RawOptions o;
  o.port = (*server)->port();
  o.source_address = "127.0.0.2";
  o.receive_window = 1 << 30;  // the server may send all it likes...
  o.connection_window = 1u << 30;
  o.read = false;              // ...and none of it is read
  absl::StatusOr<std::unique_ptr<H2RawConnection>> conn = H2RawConnection::Connect(o);
  ASSERT_TRUE(conn.ok()) << conn.status();
  // Tensors of crop 512 (3 MB each), 64 times over: far more than the
  // socket buffers on both sides hold.
  AugmentOptions augment;
  augment.crop_size = 512;
  FetchRequestBuilder builder(0, 1, augment);
  for (int i = 0; i < 64; ++i) builder.Add(i % 8, Stage::kTensor);
  const std::string bytes = builder.Take().SerializeAsString();
  const uint32_t stream = (*conn)->StartCall("/sophon.v1.SampleService/Fetch", false);
  (*conn)->SendData(stream, H2RawConnection::GrpcPrefix(static_cast<uint32_t>(bytes.size())) + bytes,
                    false);
  ASSERT_TRUE((*conn)->Flush(absl::Now() + absl::Seconds(5)));

  StreamRegistry& registry = (*server)->service()->registry();
  for (int i = 0; i < 500 && registry.open_streams() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(registry.open_streams(), 1);
  const absl::Time start = absl::Now();
  while (registry.open_streams() > 0 && absl::Now() - start < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(registry.open_streams(), 0);
  // The socket stalls once the buffers are full (well under a second on
  // loopback), then 1 s of TCP_USER_TIMEOUT; gRPC's default would be 20 s.
  EXPECT_LT(took, absl::Seconds(10)) << "the stream ended after " << took;
  v1::ServerStats stats;
  ASSERT_TRUE((*server)->service()->GetStats({}, &stats).ok());
  for (int i = 0; i < 200 && stats.inflight_bytes() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE((*server)->service()->GetStats({}, &stats).ok());
  }
  EXPECT_EQ(stats.inflight_bytes(), 0u) << "the budget it held went back";
}

}  // namespace
}  // namespace sophon
