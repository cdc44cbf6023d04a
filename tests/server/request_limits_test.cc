// Each method's request held to what that method needs (server/request_limits.h),
// on a real server on 127.0.0.1:0: a unary request padded with unknown fields
// to 64 KiB is refused naming its method's limit while a Fetch request of that
// size is served; and, with a raw HTTP/2 client (tools/bench/h2_raw) from
// 127.0.0.2, the service sees a unary call before its request (it counts it,
// refuses it over the caps having let at most the stream's window of it in,
// and ends it when its request does not arrive whole in time).
#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/request_limits.h"
#include "server/storage_server.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/refusal.h"
#include "sophon/net/wire.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_util.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

constexpr char kPeer[] = "ipv4:127.0.0.2";
constexpr int64_t kPaddedBytes = 64 << 10;
constexpr uint32_t kHalfSentBytes = 512 << 10;

// `message` with an unknown length-delimited field (number 15) that makes it
// `bytes` long encoded.
template <typename T>
T Padded(T message, int64_t bytes) {
  const int64_t have = static_cast<int64_t>(message.ByteSizeLong());
  // A tag byte and a 3-byte length (the payload is over 16 KiB).
  const int64_t payload = bytes - have - 1 - 3;
  message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(
      15, std::string(static_cast<size_t>(payload), 'x'));
  EXPECT_EQ(static_cast<int64_t>(message.ByteSizeLong()), bytes);
  return message;
}

TEST(RequestLimitsTest, EveryUnaryMethodOfTheProtoHasALimitThatHoldsItsLargestRequest) {
  const google::protobuf::ServiceDescriptor* service =
      v1::GetStatsRequest::descriptor()->file()->FindServiceByName("SampleService");
  ASSERT_NE(service, nullptr);
  int unary = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    if (m->client_streaming()) continue;  // Fetch: ServiceOptions.max_request_bytes
    ++unary;
    const std::string path = absl::StrCat("/", service->full_name(), "/", m->name());
    bool found = false;
    for (const UnaryMethodInfo& info : kUnaryMethods) found |= path == info.path;
    EXPECT_TRUE(found) << path << " has no entry in kUnaryMethods";
  }
  EXPECT_EQ(unary, 4);

  v1::GetManifestPageRequest page;
  page.set_fingerprint(UINT64_MAX);
  page.set_start(UINT64_MAX);
  v1::GetRelativePathsRequest paths;
  paths.set_fingerprint(UINT64_MAX);
  for (int i = 0; i < kMaxRelativePathsPerRequest; ++i) paths.add_ids(UINT64_MAX);
  const struct {
    UnaryMethod method;
    int64_t largest;  // the request at its largest, without room for new fields
  } cases[] = {
      {UnaryMethod::kGetManifest, static_cast<int64_t>(v1::GetManifestRequest().ByteSizeLong())},
      {UnaryMethod::kGetManifestPage, static_cast<int64_t>(page.ByteSizeLong())},
      {UnaryMethod::kGetRelativePaths, static_cast<int64_t>(paths.ByteSizeLong())},
      {UnaryMethod::kGetStats, static_cast<int64_t>(v1::GetStatsRequest().ByteSizeLong())},
      // HealthCheckRequest { string service = 1; } naming the longest name.
      {UnaryMethod::kHealthCheck, 1 + 2 + kMaxHealthServiceNameBytes},
      {UnaryMethod::kHealthWatch, 1 + 2 + kMaxHealthServiceNameBytes},
  };
  for (const auto& c : cases) {
    const UnaryMethodInfo& info = MethodInfo(c.method);
    EXPECT_LE(c.largest + kNewFieldsBytes, info.max_request_bytes) << info.name;
    // A few KiB at most: what a half-sent request of it is allowed.
    EXPECT_LE(info.max_request_bytes, 4 << 10) << info.name;
    EXPECT_TRUE(CheckUnaryRequestBytes(c.method, info.max_request_bytes).ok());
    const absl::Status over = CheckUnaryRequestBytes(c.method, info.max_request_bytes + 1);
    EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(over.message().find(info.name), std::string::npos) << over;
    EXPECT_NE(over.message().find(absl::StrCat("(", info.max_request_bytes, " bytes")),
              std::string::npos)
        << over;
  }
}

class RequestLimitsServerTest : public ::testing::Test {
 protected:
  void Start(const ServiceOptions& service) {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 8;
    StorageServerOptions options;
    options.data_dir = testing::MakeTestDataset("request_limits", d);
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    options.service = service;
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  }

  uint64_t Refused(const std::string& limit) {
    v1::ServerStats stats;
    EXPECT_TRUE(server_->service()->GetStats({}, &stats).ok());
    auto it = stats.rejections_by_limit().find(limit);
    return it == stats.rejections_by_limit().end() ? 0 : it->second;
  }

  // A connection from 127.0.0.2 that has seen the server's SETTINGS (so that
  // it keeps to the server's stream window).
  std::unique_ptr<H2RawConnection> Connect() {
    H2RawOptions o;
    o.port = server_->port();
    o.source_address = "127.0.0.2";
    absl::StatusOr<std::unique_ptr<H2RawConnection>> conn = H2RawConnection::Connect(o);
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    for (int i = 0; i < 200 && !(*conn)->got_peer_settings(); ++i) {
      (void)(*conn)->Pump(absl::Milliseconds(10));
    }
    EXPECT_TRUE((*conn)->got_peer_settings());
    return *std::move(conn);
  }

  // Sends `message` on `stream` as the server's windows allow, pumping until
  // the server ends the stream or `deadline`; the bytes it let through.
  static uint64_t SendUntilEnded(H2RawConnection* conn, uint32_t stream,
                                 const std::string& message, absl::Time deadline) {
    uint64_t sent = 0;
    while (conn->IsOpen(stream) && absl::Now() < deadline) {
      if (sent < message.size()) {
        sent += conn->SendData(stream, absl::string_view(message).substr(sent), false);
      }
      if (!conn->Pump(absl::Milliseconds(5)).ok()) break;
    }
    return sent;
  }

  std::unique_ptr<StorageServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(RequestLimitsServerTest, AUnaryRequestOf64KiBIsRefusedNamingItsMethodsLimit) {
  Start(ServiceOptions());
  const struct {
    UnaryMethod method;
    std::string request;
  } cases[] = {
      {UnaryMethod::kGetStats, Padded(v1::GetStatsRequest(), kPaddedBytes).SerializeAsString()},
      {UnaryMethod::kGetManifest,
       Padded(v1::GetManifestRequest(), kPaddedBytes).SerializeAsString()},
      {UnaryMethod::kGetManifestPage,
       Padded(v1::GetManifestPageRequest(), kPaddedBytes).SerializeAsString()},
      {UnaryMethod::kGetRelativePaths,
       Padded(v1::GetRelativePathsRequest(), kPaddedBytes).SerializeAsString()},
      // A HealthCheckRequest's field 15 is as unknown as a SampleService one's.
      {UnaryMethod::kHealthCheck,
       Padded(v1::GetStatsRequest(), kPaddedBytes).SerializeAsString()},
  };
  uint64_t refused = 0;
  for (const auto& c : cases) {
    const UnaryMethodInfo& info = MethodInfo(c.method);
    ASSERT_EQ(static_cast<int64_t>(c.request.size()), kPaddedBytes);
    grpc::Slice slice(c.request);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    const grpc::Status g = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), grpc::internal::RpcMethod(info.path, grpc::internal::RpcMethod::NORMAL_RPC),
        &context, request, &response);
    const absl::Status s = FromGrpcStatus(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << info.name << ": " << s;
    EXPECT_NE(s.message().find(absl::StrCat(info.name, ": a request message of 65536 bytes")),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(absl::StrCat("(", info.max_request_bytes, " bytes")),
              std::string::npos)
        << s;
    auto reason = context.GetServerTrailingMetadata().find(kRefusalMetadataKey);
    ASSERT_NE(reason, context.GetServerTrailingMetadata().end()) << info.name;
    EXPECT_EQ(std::string(reason->second.data(), reason->second.size()), "max_request_bytes");
    EXPECT_EQ(Refused("max_request_bytes"), ++refused);
  }
  // The same calls within their limits are answered.
  auto stub = v1::SampleService::NewStub(channel_);
  grpc::ClientContext context;
  v1::ServerStats stats;
  EXPECT_TRUE(stub->GetStats(&context, v1::GetStatsRequest(), &stats).ok());
}

TEST_F(RequestLimitsServerTest, AFetchRequestOf64KiBIsServed) {
  Start(ServiceOptions());
  AugmentOptions augment;
  augment.crop_size = 32;
  FetchRequestBuilder builder(0, 1, augment);
  for (uint64_t id = 0; id < 8; ++id) builder.Add(id, Stage::kCropped);
  const v1::FetchRequest request = Padded(builder.Take(), kPaddedBytes);
  auto stub = v1::SampleService::NewStub(channel_);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream =
      stub->Fetch(&context);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->WritesDone());
  int samples = 0;
  v1::FetchResponse response;
  while (stream->Read(&response)) {
    for (const v1::Sample& s : response.samples()) {
      EXPECT_EQ(s.error_code(), 0) << s.error_message();
      ++samples;
    }
  }
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(samples, 8);
  EXPECT_EQ(Refused("max_request_bytes"), 0u);
}

// gRPC hands the call to the service at its headers: it is counted (and
// would be refused over the caps) before any of its request has arrived,
// and ended when its request does not come.
TEST_F(RequestLimitsServerTest, TheServiceSeesAUnaryCallBeforeItsRequest) {
  ServiceOptions o;
  o.read_stall_timeout = absl::Seconds(1);
  Start(o);
  std::unique_ptr<H2RawConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  const uint32_t stream = conn->StartCall(MethodInfo(UnaryMethod::kGetStats).path, false);
  UnaryCalls& calls = server_->service()->unary_calls();
  for (int i = 0; i < 200 && calls.inflight(kPeer) == 0; ++i) {
    (void)conn->Pump(absl::Milliseconds(10));
  }
  EXPECT_EQ(calls.inflight(kPeer), 1) << "the call is counted with nothing of its request sent";
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (conn->IsOpen(stream) && absl::Now() < deadline) (void)conn->Pump(absl::Milliseconds(10));
  EXPECT_FALSE(conn->IsOpen(stream)) << "a call whose request never comes is ended";
  EXPECT_EQ(Refused("read_stall_timeout"), 1u);
  for (int i = 0; i < 200 && calls.inflight() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(calls.inflight(), 0);
}

// A GetStats request announcing 512 KiB whose client stops one byte short
// of it. gRPC 1.51 shows a message only whole and grows the window of a
// stream with a read pending to the announced size, so the client gets all
// it sends in (server/unary_reactor.h): the deadline ends the call, which
// gRPC's own unary handling would keep until the client left.
TEST_F(RequestLimitsServerTest, AHalfSentGetStatsOf512KiBIsEndedBeforeItsBodyIsAllReceived) {
  ServiceOptions o;
  o.read_stall_timeout = absl::Seconds(1);
  Start(o);
  std::unique_ptr<H2RawConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  const std::string half_sent =
      H2RawConnection::GrpcPrefix(kHalfSentBytes) + std::string(kHalfSentBytes - 1, '\0');
  const uint32_t stream = conn->StartCall(MethodInfo(UnaryMethod::kGetStats).path, false);
  const absl::Time start = absl::Now();
  const uint64_t sent = SendUntilEnded(conn.get(), stream, half_sent, start + absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  EXPECT_FALSE(conn->IsOpen(stream)) << "still open after " << took << ", " << sent << " sent";
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_EQ(Refused("read_stall_timeout"), 1u);
  std::cout << "the server let " << sent << " bytes of a half-sent 512 KiB GetStats request in "
            << "before it ended the call after " << took << "\n";
  UnaryCalls& calls = server_->service()->unary_calls();
  for (int i = 0; i < 200 && calls.inflight() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(calls.inflight(), 0);
}

// A call over max_unary_calls_per_peer waits, unread, and is refused when
// its wait times out: its client gets no more than the stream's initial
// window in.
TEST_F(RequestLimitsServerTest, AHalfSentGetStatsOverTheCallCapIsRefusedWithinTheStreamWindow) {
  ServiceOptions o;
  o.max_unary_calls_per_peer = 2;
  o.read_stall_timeout = absl::Seconds(30);  // the held calls stay for the test
  o.unary_wait_timeout = absl::Seconds(1);
  Start(o);
  std::unique_ptr<H2RawConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  UnaryCalls& calls = server_->service()->unary_calls();
  for (int i = 0; i < 2; ++i) conn->StartCall(MethodInfo(UnaryMethod::kGetStats).path, false);
  for (int i = 0; i < 200 && calls.inflight(kPeer) < 2; ++i) {
    (void)conn->Pump(absl::Milliseconds(10));
  }
  EXPECT_EQ(calls.inflight(kPeer), 2) << "the held calls are counted before their requests";
  const std::string half_sent =
      H2RawConnection::GrpcPrefix(kHalfSentBytes) + std::string(kHalfSentBytes - 1, '\0');
  const uint32_t stream = conn->StartCall(MethodInfo(UnaryMethod::kGetStats).path, false);
  const uint64_t sent =
      SendUntilEnded(conn.get(), stream, half_sent, absl::Now() + absl::Seconds(10));
  EXPECT_FALSE(conn->IsOpen(stream)) << sent << " bytes sent";
  EXPECT_LE(sent, static_cast<uint64_t>(o.stream_window_bytes))
      << "the refused call's request got past the stream's initial window";
  EXPECT_EQ(Refused("max_unary_calls_per_peer"), 1u);
  EXPECT_EQ(calls.inflight(kPeer), 2);
}

}  // namespace
}  // namespace sophon
