// A real server with tiny manifest pages (64 bytes: a few samples each): a
// client reads the manifest in several pages, a server that restarts with
// other data in the middle of the download is caught, and hostile page and
// path requests are refused without the server holding anything for them.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/loader/manifest_reader.h"
#include "client/loader/sample_client.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/grpc_util.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int64_t kPageBytes = 64;

std::string Dataset(const std::string& name, uint64_t seed) {
  testing::TestDatasetOptions d;
  d.classes = 3;
  d.per_class = 12;
  d.min_side = 16;
  d.max_side = 64;
  d.seed = seed;
  return testing::MakeTestDataset(name, d);
}

std::unique_ptr<StorageServer> StartServer(const std::string& root, int port = 0) {
  StorageServerOptions o;
  o.data_dir = root;
  o.host = "127.0.0.1";
  o.port = port;
  o.service.prep_workers = 1;
  o.service.manifest_page_bytes = kPageBytes;
  o.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// The manifest's calls over a plain stub, waiting for the server to be
// there; `before_page` runs before each page is asked for.
class StubRpcs : public ManifestRpcs {
 public:
  explicit StubRpcs(const std::string& address)
      : stub_(v1::SampleService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  absl::Status GetManifest(v1::Manifest* header) override {
    grpc::ClientContext context;
    Prepare(&context);
    return FromGrpcStatus(stub_->GetManifest(&context, {}, header));
  }
  absl::Status GetManifestPage(const v1::GetManifestPageRequest& request,
                               v1::ManifestPage* page) override {
    ++pages;
    if (before_page) before_page(pages);
    grpc::ClientContext context;
    Prepare(&context);
    const absl::Status s = FromGrpcStatus(stub_->GetManifestPage(&context, request, page));
    if (s.ok()) largest_page = std::max(largest_page, static_cast<int64_t>(page->ByteSizeLong()));
    return s;
  }

  int pages = 0;
  int64_t largest_page = 0;
  std::function<void(int page)> before_page;

 private:
  static void Prepare(grpc::ClientContext* context) {
    context->set_wait_for_ready(true);  // a restarting server: wait for it, no sleep
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
  std::unique_ptr<v1::SampleService::Stub> stub_;
};

TEST(ManifestPagingTest, AClientReadsEveryPageAndPathsOnRequest) {
  std::unique_ptr<StorageServer> server = StartServer(Dataset("paging_pages", 1));
  ASSERT_NE(server, nullptr);
  const SampleSource& source = server->source();
  ASSERT_EQ(source.size(), 36u);
  EXPECT_GE(server->service()->manifest_pages().num_pages(), 4u);

  StubRpcs rpcs(server->address());
  absl::StatusOr<ServerManifest> read = ReadManifest(rpcs, server->address());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(rpcs.pages + 1, static_cast<int>(server->service()->manifest_pages().num_pages()));
  EXPECT_LE(rpcs.largest_page, kPageBytes);

  ClientOptions copts;
  copts.address = server->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  ASSERT_TRUE(client.ok()) << client.status();
  const ServerManifest& m = (*client)->manifest();
  ASSERT_EQ(m.num_samples(), source.size());
  EXPECT_EQ(m.fingerprint, source.fingerprint());
  EXPECT_EQ(m.class_names, source.class_names());
  for (uint64_t id = 0; id < source.size(); ++id) {
    EXPECT_EQ(m.labels[id], source.manifest().label(id)) << id;
    EXPECT_EQ(m.raw_sizes[id], source.manifest().raw_size(id)) << id;
  }
  absl::StatusOr<std::vector<std::string>> paths = (*client)->RelativePaths({35, 0});
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(*paths, (std::vector<std::string>{source.entry(35).relative_path,
                                              source.entry(0).relative_path}));
}

// The server is replaced, on the same port, after the client has two pages:
// with the same data the download goes on; with other data the new server
// refuses the page (the client's fingerprint is not its own) and the client
// fails naming the restart, instead of mixing two datasets.
TEST(ManifestPagingTest, ARestartWithOtherDataMidDownloadIsRefused) {
  const std::string data = Dataset("paging_restart_a", 1);
  const std::string other = Dataset("paging_restart_b", 2);
  for (const std::string& restart_with : {data, other}) {
    std::unique_ptr<StorageServer> server = StartServer(data);
    ASSERT_NE(server, nullptr);
    const int port = server->port();
    const std::string address = server->address();
    const uint64_t fingerprint = server->source().fingerprint();
    StubRpcs rpcs(address);
    rpcs.before_page = [&](int page) {
      if (page != 3) return;
      server->Shutdown(absl::ZeroDuration());
      server.reset();
      server = StartServer(restart_with, port);
    };
    absl::StatusOr<ServerManifest> read = ReadManifest(rpcs, address);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(rpcs.pages >= 3, true);
    if (restart_with == data) {
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(read->num_samples(), 36u);
      EXPECT_EQ(read->fingerprint, fingerprint);
      continue;
    }
    ASSERT_NE(server->source().fingerprint(), fingerprint);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << read.status();
    EXPECT_NE(read.status().message().find("restarted with other data"), std::string::npos)
        << read.status();
    EXPECT_EQ(rpcs.pages, 3);
    // A client connecting now reads the new manifest whole.
    ClientOptions copts;
    copts.address = address;
    absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->manifest().fingerprint, server->source().fingerprint());
  }
}

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status RawCall(grpc::Channel* channel, const std::string& method, const std::string& bytes) {
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  return FromGrpcStatus(grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel,
      grpc::internal::RpcMethod(("/sophon.v1.SampleService/" + method).c_str(),
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &context, Bytes(bytes), &response));
}

TEST(ManifestPagingTest, HostilePageAndPathRequestsAreRefused) {
  std::unique_ptr<StorageServer> server = StartServer(Dataset("paging_hostile", 1));
  ASSERT_NE(server, nullptr);
  const uint64_t fingerprint = server->source().fingerprint();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::SampleService::Stub> stub = v1::SampleService::NewStub(channel);
  auto page = [&](uint64_t fp, uint64_t start) {
    v1::GetManifestPageRequest r;
    r.set_fingerprint(fp);
    r.set_start(start);
    v1::ManifestPage p;
    grpc::ClientContext context;
    return FromGrpcStatus(stub->GetManifestPage(&context, r, &p));
  };
  EXPECT_TRUE(page(fingerprint, 35).ok());
  for (uint64_t start : {uint64_t{36}, uint64_t{1} << 63, ~uint64_t{0}}) {
    const absl::Status s = page(fingerprint, start);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_NE(s.message().find("36 samples"), std::string::npos) << s;
  }
  EXPECT_EQ(page(fingerprint + 1, 0).code(), absl::StatusCode::kFailedPrecondition);
  // Not a request, and a request over its method's limit (server/request_limits.h).
  absl::Status s = RawCall(channel.get(), "GetManifestPage", "\xff\xff\xff");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("GetManifestPageRequest"), std::string::npos) << s;
  v1::GetRelativePathsRequest huge;
  huge.set_fingerprint(fingerprint);
  for (int i = 0; i < 20000; ++i) huge.add_ids(~uint64_t{0});  // 10 bytes each
  s = RawCall(channel.get(), "GetRelativePaths", huge.SerializeAsString());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("over the server's limit for GetRelativePaths requests"),
            std::string::npos)
      << s;
  // Paths: a few ids, inside the manifest.
  auto paths = [&](const std::vector<uint64_t>& ids) {
    v1::GetRelativePathsRequest r;
    r.set_fingerprint(fingerprint);
    for (uint64_t id : ids) r.add_ids(id);
    v1::RelativePaths p;
    grpc::ClientContext context;
    return FromGrpcStatus(stub->GetRelativePaths(&context, r, &p));
  };
  EXPECT_TRUE(paths(std::vector<uint64_t>(16, 35)).ok());
  EXPECT_EQ(paths(std::vector<uint64_t>(17, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(paths({36}).code(), absl::StatusCode::kOutOfRange);
  // Each refusal but the benign restart was counted: the one too large under
  // its limit.
  v1::ServerStats stats;
  ASSERT_TRUE(server->service()->GetStats({}, &stats).ok());
  EXPECT_EQ(stats.rejections_by_limit().at("invalid_request"), 6u);
  EXPECT_EQ(stats.rejections_by_limit().at("max_request_bytes"), 1u);
}

}  // namespace
}  // namespace sophon
