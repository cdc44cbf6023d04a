// Fetch streams that a live storage server resets (gRPC under memory pressure
// resets streams with RST_STREAM code 11, which the client sees as
// RESOURCE_EXHAUSTED "Received RST_STREAM with error code 11" with no reason
// of the server's; it also sheds load with GOAWAY and cancels; the server
// ends streams for their state with the reason in its sophon-refusal
// trailer): the loader rides them out however many come in a row, whatever
// their messages say, and every sample arrives once, in order, byte for byte
// as without them. A refusal that would come again (PERMISSION_DENIED,
// INVALID_ARGUMENT, the server's own limits on requests, by their reason)
// still ends the epoch at once with its message.
//
// The resets come from a small in-test proxy in front of a real storage
// server (real gRPC on 127.0.0.1, port 0, real files): it forwards every call,
// except that it ends the first Fetch streams it is told to, after their first
// request, with the status (and the reason trailer) it is given.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/loader/loader.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "sophon/net/refusal.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// How the proxy ends a stream: a status, and the server's reason (a
// RefusalName) in the sophon-refusal trailer, or none.
struct Reset {
  Reset(grpc::Status s, std::string r = "") : status(std::move(s)), reason(std::move(r)) {}
  grpc::Status status;
  std::string reason;
};

class ResettingProxy final : public v1::SampleService::Service {
 public:
  explicit ResettingProxy(const std::string& upstream)
      : stub_(v1::SampleService::NewStub(
            grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials()))) {}

  // The next Fetch streams, one status each, end with these.
  void ResetNext(std::vector<Reset> resets) {
    absl::MutexLock lock(&mu_);
    for (Reset& r : resets) resets_.push_back(std::move(r));
  }
  // Every Fetch stream from now on ends with `reset`.
  void ResetAll(Reset reset) {
    absl::MutexLock lock(&mu_);
    reset_all_ = std::move(reset);
  }
  int resets_done() const {
    absl::MutexLock lock(&mu_);
    return resets_done_;
  }

  grpc::Status GetManifest(grpc::ServerContext*, const v1::GetManifestRequest* request,
                           v1::Manifest* response) override {
    grpc::ClientContext context;
    return stub_->GetManifest(&context, *request, response);
  }
  grpc::Status GetManifestPage(grpc::ServerContext*, const v1::GetManifestPageRequest* request,
                               v1::ManifestPage* response) override {
    grpc::ClientContext context;
    return stub_->GetManifestPage(&context, *request, response);
  }
  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest* request,
                        v1::ServerStats* response) override {
    grpc::ClientContext context;
    return stub_->GetStats(&context, *request, response);
  }
  grpc::Status GetRelativePaths(grpc::ServerContext*, const v1::GetRelativePathsRequest* request,
                                v1::RelativePaths* response) override {
    grpc::ClientContext context;
    return stub_->GetRelativePaths(&context, *request, response);
  }

  grpc::Status Fetch(grpc::ServerContext* server_context,
                     grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* down) override {
    std::optional<Reset> reset;
    {
      absl::MutexLock lock(&mu_);
      if (reset_all_.has_value()) {
        reset = reset_all_;
      } else if (!resets_.empty()) {
        reset = std::move(resets_.front());
        resets_.pop_front();
      }
      if (reset.has_value()) ++resets_done_;
    }
    if (reset.has_value()) {
      v1::FetchRequest first;  // the client owes nothing before its first request
      down->Read(&first);
      if (!reset->reason.empty()) {
        server_context->AddTrailingMetadata(kRefusalMetadataKey, reset->reason);
      }
      return reset->status;
    }
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> up =
        stub_->Fetch(&context);
    std::thread forward([&] {
      v1::FetchRequest request;
      while (down->Read(&request)) {
        if (!up->Write(request)) break;
      }
      up->WritesDone();
    });
    v1::FetchResponse response;
    while (up->Read(&response)) {
      if (!down->Write(response)) {
        context.TryCancel();
        break;
      }
    }
    const grpc::Status status = up->Finish();
    // The forwarder may still wait for the client's next request.
    if (!status.ok()) server_context->TryCancel();
    forward.join();
    return status;
  }

 private:
  std::unique_ptr<v1::SampleService::Stub> stub_;
  mutable absl::Mutex mu_;
  std::deque<Reset> resets_ ABSL_GUARDED_BY(mu_);
  std::optional<Reset> reset_all_ ABSL_GUARDED_BY(mu_);
  int resets_done_ ABSL_GUARDED_BY(mu_) = 0;
};

// What gRPC reports when the server resets a stream with ENHANCE_YOUR_CALM.
grpc::Status Rst11() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "Received RST_STREAM with error code 11");
}

class StreamResetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.classes = 2;
    d.per_class = 10;  // 20 samples, 4 batches of 5
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(testing::MakeTestDataset("stream_reset", d));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    direct_ = std::move(local->client);
    proxy_ = std::make_unique<ResettingProxy>(server_->address());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &proxy_port_);
    builder.RegisterService(proxy_.get());
    proxy_server_ = builder.BuildAndStart();
    ASSERT_NE(proxy_server_, nullptr);
    ClientOptions options;
    options.address = ProxyAddress();
    options.connect_timeout = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    if (proxy_server_) proxy_server_->Shutdown(std::chrono::system_clock::now());
  }

  std::string ProxyAddress() const { return absl::StrCat("127.0.0.1:", proxy_port_); }

  static LoaderOptions Options() {
    LoaderOptions o;
    o.batch_size = 5;
    o.workers = 2;
    o.prefetch_batches = 2;
    o.seed = 7;
    o.pipeline.augment.crop_size = 32;
    return o;
  }

  absl::StatusOr<std::vector<Batch>> RunEpoch(SampleClient* client, LoaderEpochStats* stats) {
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client, Options(), &policy_);
    if (!loader.ok()) return loader.status();
    if (absl::Status s = (*loader)->StartEpoch(0); !s.ok()) return s;
    std::vector<Batch> batches;
    while (true) {
      Batch b;
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) break;
      batches.push_back(std::move(b));
    }
    *stats = (*loader)->stats();
    return batches;
  }

  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> direct_;
  std::unique_ptr<ResettingProxy> proxy_;
  std::unique_ptr<grpc::Server> proxy_server_;
  int proxy_port_ = 0;
  std::unique_ptr<SampleClient> client_;
  FixedPolicy policy_{Stage::kCropped, "resizeoff"};
};

TEST_F(StreamResetTest, StreamsResetManyTimesInARowByALiveServerAreRiddenOut) {
  LoaderEpochStats stats;
  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(direct_.get(), &stats);
  ASSERT_TRUE(reference.ok()) << reference.status();
  // Eleven streams in a row end before delivering a sample.
  const grpc::StatusCode kExhausted = grpc::StatusCode::RESOURCE_EXHAUSTED;
  proxy_->ResetNext({Rst11(), Rst11(), Rst11(), grpc::Status(grpc::StatusCode::CANCELLED, "reset"),
                     // The transport shedding load, however gRPC words it.
                     grpc::Status(kExhausted, "the transport gave up (reworded)"),
                     grpc::Status(grpc::StatusCode::UNAVAILABLE, "GOAWAY received: Buffers full"),
                     // Not the server's: its words do not make it a refusal of the requests.
                     grpc::Status(kExhausted, "a request names 900 samples, over the server's "
                                              "max_ids_per_request limit (512)"),
                     // The server's own stream-state limits (its read slots, idle streams, a
                     // write not taken), by their reason, whatever the message says.
                     Reset(grpc::Status(kExhausted, "slow reader (reworded)"), "read_stall_timeout"),
                     Reset(grpc::Status(kExhausted, "slot gone"), "max_reading_streams_taken"),
                     Reset(grpc::Status(kExhausted, ""), "idle_stream_timeout"),
                     Reset(grpc::Status(kExhausted, "over the server's max_request_bytes limit"),
                           "write_stall_timeout")});
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<Batch>> batches = RunEpoch(client_.get(), &stats);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(proxy_->resets_done(), 11);
  EXPECT_EQ(stats.stream_breaks, 11);
  EXPECT_EQ(stats.reconnects, 11);
  EXPECT_EQ(stats.samples, 20u);
  // Backoffs of 50 ms doubling to 1 s: about 7.6 s at most, not connect_timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  ASSERT_EQ(batches->size(), reference->size());
  std::multiset<uint64_t> ids;
  for (size_t k = 0; k < batches->size(); ++k) {
    const Batch& a = (*batches)[k];
    const Batch& b = (*reference)[k];
    ids.insert(a.ids.begin(), a.ids.end());
    ASSERT_EQ(a.ids, b.ids) << "batch " << k;
    EXPECT_EQ(a.labels, b.labels) << "batch " << k;
    ASSERT_EQ(a.images.size(), b.images.size()) << "batch " << k;
    EXPECT_EQ(0, std::memcmp(a.images.data(), b.images.data(), a.images.size() * sizeof(float)))
        << "batch " << k;
  }
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 20u);
  EXPECT_EQ(ids.size(), 20u);
}

// A refusal that the same request would meet again ends the epoch at once,
// with the server's code and message and its address: by its code, or by the
// server's reason whatever the message says.
TEST_F(StreamResetTest, PermanentRefusalsStillEndTheEpochAtOnce) {
  const grpc::StatusCode kExhausted = grpc::StatusCode::RESOURCE_EXHAUSTED;
  for (const Reset& reset :
       {Reset(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "this peer may not fetch")),
        Reset(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no credentials")),
        Reset(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "crop size 0 is not valid")),
        Reset(grpc::Status(kExhausted, "a request names 900 samples, over the server's "
                                       "max_ids_per_request limit (512)"),
              "max_ids_per_request"),
        Reset(grpc::Status(kExhausted, "Received RST_STREAM with error code 11 (reworded)"),
              "max_request_bytes"),
        Reset(grpc::Status(kExhausted, "the stream was idle (misleading)"), "invalid_request"),
        // A reason this client does not know, on RESOURCE_EXHAUSTED.
        Reset(grpc::Status(kExhausted, "a newer server's limit"), "max_something_new")}) {
    const grpc::Status& refusal = reset.status;
    SCOPED_TRACE(absl::StrCat(refusal.error_message(), " (reason '", reset.reason, "')"));
    proxy_->ResetAll(reset);
    const absl::Time start = absl::Now();
    LoaderEpochStats stats;
    absl::StatusOr<std::vector<Batch>> batches = RunEpoch(client_.get(), &stats);
    ASSERT_FALSE(batches.ok());
    EXPECT_EQ(static_cast<int>(batches.status().code()), static_cast<int>(refusal.error_code()))
        << batches.status();
    EXPECT_NE(batches.status().message().find(refusal.error_message()), std::string::npos)
        << batches.status();
    EXPECT_NE(batches.status().message().find(ProxyAddress()), std::string::npos)
        << batches.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  }
}

}  // namespace
}  // namespace sophon
