// In-process cluster tests of how the loader meets the storage server's
// limits and settings: a Fetch stream refused because the server is full is
// retried with backoff (and given up on after the client's connect_timeout),
// other refusals end the epoch at once naming the server, a request over the
// server's size limit says which flag sets it, the two sides must agree on
// lenient JPEG decoding, and the resend after a restart says what it resends.
// A real sophon-server on 127.0.0.1 (port 0) over real JPEG files.
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "server/storage_server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// Polls `condition` until it holds or 20 s pass. Only for what has no hook
// to wait on (the server's counters, the loader's stats).
bool PollUntil(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class LoaderServerLimitsTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& root, const std::function<void(ServiceOptions*)>& tweak,
                   absl::Duration connect_timeout = absl::Seconds(20), int port = 0) {
    StorageServerOptions options;
    options.data_dir = root;
    options.host = "127.0.0.1";
    options.port = port;
    options.service.prep_workers = 2;
    if (tweak) tweak(&options.service);
    options.stats_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    if (client_ != nullptr) return;  // a restart: the client knows the address
    ClientOptions copts;
    copts.address = server_->address();
    copts.connect_timeout = connect_timeout;
    absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  static LoaderOptions SmallOptions() {
    LoaderOptions o;
    o.batch_size = 5;
    o.workers = 2;
    o.prefetch_batches = 2;
    o.seed = 3;
    o.pipeline.augment.crop_size = 32;
    return o;
  }

  uint64_t Rejections(const std::string& limit) {
    absl::StatusOr<v1::ServerStats> stats = client_->GetStats();
    if (!stats.ok()) return 0;
    auto it = stats->rejections_by_limit().find(limit);
    return it == stats->rejections_by_limit().end() ? 0 : it->second;
  }

  // Runs the loader's epoch to its end: the batches, or the first error.
  static absl::StatusOr<std::vector<Batch>> Drain(Loader* loader) {
    std::vector<Batch> batches;
    while (true) {
      Batch b;
      absl::StatusOr<bool> more = loader->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) return batches;
      batches.push_back(std::move(b));
    }
  }

  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

// The server's only slot (max_streams = 1, or max_streams_per_peer = 1) is
// held by another stream: the loader's stream is refused, retried with
// backoff (the server counts each refusal), and once the slot is free the
// epoch delivers every sample, as an epoch that was never refused.
TEST_F(LoaderServerLimitsTest, StreamRefusedForWantOfASlotIsRetriedUntilOneFrees) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;
  const std::string root = testing::MakeTestDataset("limits_slots", dopts);
  for (const std::string limit : {"max_streams", "max_streams_per_peer"}) {
    SCOPED_TRACE(limit);
    client_.reset();
    StartServer(root, [&](ServiceOptions* s) {
      if (limit == "max_streams") {
        s->max_streams = 1;
      } else {
        s->max_streams_per_peer = 1;
      }
    });
    const LoaderOptions options = SmallOptions();
    FixedPolicy policy(Stage::kTensor, "alloff");
    // Another stream takes the slot (from this client: the same peer).
    std::unique_ptr<FetchCall> held = client_->OpenFetch();
    ASSERT_TRUE(PollUntil([&] {
      absl::StatusOr<v1::ServerStats> s = client_->GetStats();
      return s.ok() && s->active_streams() == 1;
    }));
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, &policy);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    // Refused once, and refused again on the retry.
    ASSERT_TRUE(PollUntil([&] { return Rejections(limit) >= 2; }))
        << "refusals: " << Rejections(limit);
    EXPECT_GE((*loader)->stats().streams_refused, 1);
    // The slot frees.
    held->WritesDone();
    v1::FetchResponse response;
    while (held->Read(&response)) {
    }
    EXPECT_TRUE(held->Finish().ok());
    absl::StatusOr<std::vector<Batch>> batches = Drain(loader->get());
    ASSERT_TRUE(batches.ok()) << batches.status();
    const LoaderEpochStats stats = (*loader)->stats();
    EXPECT_EQ(stats.samples, 20u);
    EXPECT_GE(stats.streams_refused, 2);
    EXPECT_EQ(stats.stream_breaks, 0);
    EXPECT_EQ(static_cast<uint64_t>(stats.streams_refused), Rejections(limit));
    (*loader)->Stop();

    // The same epoch with the slot free from the start (once the server has
    // closed the last stream): the same batches.
    ASSERT_TRUE(PollUntil([&] {
      absl::StatusOr<v1::ServerStats> s = client_->GetStats();
      return s.ok() && s->active_streams() == 0;
    }));
    absl::StatusOr<std::unique_ptr<Loader>> fresh =
        Loader::Create(client_.get(), options, &policy);
    ASSERT_TRUE(fresh.ok());
    ASSERT_TRUE((*fresh)->StartEpoch(0).ok());
    absl::StatusOr<std::vector<Batch>> reference = Drain(fresh->get());
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_EQ((*fresh)->stats().streams_refused, 0);
    ASSERT_EQ(batches->size(), reference->size());
    for (size_t k = 0; k < batches->size(); ++k) {
      EXPECT_EQ((*batches)[k].ids, (*reference)[k].ids) << k;
      EXPECT_EQ((*batches)[k].images, (*reference)[k].images) << k;
    }
    (*fresh)->Stop();
    server_.reset();
  }
}

// A slot that never frees: after the client's connect_timeout the epoch ends
// with RESOURCE_EXHAUSTED naming the server and the option.
TEST_F(LoaderServerLimitsTest, StreamRefusedPastTheConnectTimeoutEndsTheEpoch) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 1;
  dopts.per_class = 5;
  StartServer(testing::MakeTestDataset("limits_full", dopts),
              [](ServiceOptions* s) { s->max_streams = 1; }, absl::Milliseconds(700));
  std::unique_ptr<FetchCall> held = client_->OpenFetch();
  ASSERT_TRUE(PollUntil([&] {
    absl::StatusOr<v1::ServerStats> s = client_->GetStats();
    return s.ok() && s->active_streams() == 1;
  }));
  FixedPolicy policy(Stage::kTensor, "alloff");
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(client_.get(), SmallOptions(), &policy);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  Batch batch;
  const absl::StatusOr<bool> more = (*loader)->Next(&batch);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted) << more.status();
  EXPECT_NE(more.status().message().find(server_->address()), std::string::npos)
      << more.status();
  EXPECT_NE(more.status().message().find("ClientOptions.connect_timeout"), std::string::npos)
      << more.status();
  EXPECT_NE(more.status().message().find("max_streams"), std::string::npos) << more.status();
  EXPECT_GE((*loader)->stats().streams_refused, 2);
  EXPECT_GE(Rejections("max_streams"), 2u);
  (*loader)->Stop();
  held->Cancel();
  v1::FetchResponse response;
  while (held->Read(&response)) {
  }
  held->Finish().IgnoreError();
}

// A refusal that is not for want of a slot is not retried: the epoch ends at
// once with the server's code and address. gRPC's own "message larger than
// max" (a request over about twice the server's max_request_bytes) says which
// flag sets the limit.
TEST_F(LoaderServerLimitsTest, OtherRefusalsEndTheEpochAtOnceNamingTheServer) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 400;
  dopts.min_side = 16;
  dopts.max_side = 24;
  const std::string root = testing::MakeTestDataset("limits_other", dopts);
  StartServer(root, [](ServiceOptions* s) {
    s->max_request_bytes = 64;  // gRPC's limit: 2 * 64 + 4096 bytes
  });
  FixedPolicy policy(Stage::kTensor, "alloff");
  {
    SCOPED_TRACE("request message too large");
    LoaderOptions options = SmallOptions();
    options.pipeline.augment.crop_size = 16;
    options.batch_size = 800;  // one message of 800 sample requests: over 4224 bytes
    options.requests_per_message = 800;
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, &policy);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    const absl::StatusOr<std::vector<Batch>> batches = Drain(loader->get());
    ASSERT_FALSE(batches.ok());
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kResourceExhausted) << batches.status();
    EXPECT_NE(batches.status().message().find(server_->address()), std::string::npos)
        << batches.status();
    EXPECT_NE(batches.status().message().find("larger than max"), std::string::npos)
        << batches.status();
    EXPECT_NE(batches.status().message().find("sophon-server --max-request-bytes"),
              std::string::npos)
        << batches.status();
    EXPECT_EQ((*loader)->stats().streams_refused, 0);
    EXPECT_EQ((*loader)->stats().reconnects, 0);
  }
  server_.reset();
  client_.reset();
  StartServer(root, [](ServiceOptions* s) { s->max_crop_size = 24; });
  {
    SCOPED_TRACE("crop over the server's limit");
    LoaderOptions options = SmallOptions();  // crop 32 > 24
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, &policy);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    const absl::StatusOr<std::vector<Batch>> batches = Drain(loader->get());
    ASSERT_FALSE(batches.ok());
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kInvalidArgument) << batches.status();
    EXPECT_NE(batches.status().message().find(server_->address()), std::string::npos)
        << batches.status();
    EXPECT_EQ((*loader)->stats().streams_refused, 0);
    EXPECT_EQ((*loader)->stats().reconnects, 0);
  }
}

// The server says in its manifest whether it decodes JPEGs leniently; a
// loader that decodes otherwise refuses to start, naming both sides' flags
// and the server. A manifest without the field (an older server) is strict.
TEST_F(LoaderServerLimitsTest, LenientJpegMustAgreeWithTheServer) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 1;
  dopts.per_class = 5;
  const std::string root = testing::MakeTestDataset("limits_lenient", dopts);
  for (bool server_lenient : {false, true}) {
    client_.reset();
    StartServer(root, [&](ServiceOptions* s) { s->limits.lenient = server_lenient; });
    EXPECT_EQ(client_->manifest().lenient_jpeg, server_lenient);
    for (bool client_lenient : {false, true}) {
      SCOPED_TRACE(absl::StrCat("server lenient ", server_lenient, ", client lenient ",
                                client_lenient));
      LoaderOptions options = SmallOptions();
      options.pipeline.limits.lenient = client_lenient;
      FixedPolicy policy(Stage::kRaw, "nooff");
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          Loader::Create(client_.get(), options, &policy);
      if (server_lenient == client_lenient) {
        ASSERT_TRUE(loader.ok()) << loader.status();
        ASSERT_TRUE((*loader)->StartEpoch(0).ok());
        absl::StatusOr<std::vector<Batch>> batches = Drain(loader->get());
        ASSERT_TRUE(batches.ok()) << batches.status();
        EXPECT_EQ(batches->size(), 1u);
        continue;
      }
      ASSERT_FALSE(loader.ok());
      const absl::Status& s = loader.status();
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_NE(s.message().find(server_->address()), std::string::npos) << s;
      EXPECT_NE(s.message().find("sophon-server --lenient-jpeg"), std::string::npos) << s;
      EXPECT_NE(s.message().find("sophon-train --lenient-jpeg"), std::string::npos) << s;
      EXPECT_NE(s.message().find("LoaderOptions.pipeline.limits.lenient"), std::string::npos)
          << s;
      EXPECT_NE(s.message().find(server_lenient ? "the server is lenient, this node strict"
                                                : "the server is strict, this node lenient"),
                std::string::npos)
          << s;
    }
    server_.reset();
  }
  // An older server sends no lenient_jpeg: strict.
  ServerManifest old_server;
  old_server.labels = {0};
  DecodeLimits strict, lenient;
  lenient.lenient = true;
  EXPECT_TRUE(CheckJpegDecodingAgrees(old_server, "127.0.0.1:1", strict).ok());
  EXPECT_EQ(CheckJpegDecodingAgrees(old_server, "127.0.0.1:1", lenient).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The stream breaks with nothing owed (every requested sample had arrived);
// while the server is away the trainer takes two batches and the loader
// requests two more on the dead stream. The log says so: 0 owed at the
// break, and the resend names the 10 requested since, which is what it resends.
TEST_F(LoaderServerLimitsTest, ResendAfterARestartLogsWhatItResends) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;  // 4 batches of 5
  const std::string root = testing::MakeTestDataset("limits_resend_log", dopts);
  StartServer(root, nullptr);
  const int port = server_->port();
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  FixedPolicy policy(Stage::kCropped, "resizeoff");
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(client_.get(), SmallOptions(), &policy);  // prefetch 2
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  const auto prepared = [&] {
    uint64_t n = 0;
    for (uint64_t k : (*loader)->stats().samples_by_stage) n += k;
    return n;
  };
  // Both prefetched batches arrived; the loader waits for the trainer.
  ASSERT_TRUE(PollUntil([&] { return prepared() == 10; }));
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  ASSERT_TRUE(PollUntil([&] { return (*loader)->stats().stream_breaks == 1; }));
  std::vector<Batch> batches(2);
  for (Batch& b : batches) {
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok() && *more) << more.status();
  }
  // The room made, batches 2 and 3 are requested on the dead stream.
  ASSERT_TRUE(PollUntil([&] { return (*loader)->stats().requested == 20; }));
  StartServer(root, nullptr, absl::Seconds(20), port);
  absl::StatusOr<std::vector<Batch>> rest = Drain(loader->get());
  const LoaderEpochStats stats = (*loader)->stats();
  // No thread may log into `log` once the capture logger is gone: the
  // loader's threads and the servers' stop first.
  loader->reset();
  server_.reset();
  spdlog::set_default_logger(previous);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->size(), 2u);
  EXPECT_EQ(stats.resent, 10u);
  EXPECT_EQ(stats.samples, 20u);

  const std::string text = log.str();
  std::smatch broke, resend;
  ASSERT_TRUE(std::regex_search(text, broke, std::regex("broke .* with (\\d+) requested "
                                                        "samples not received")))
      << text;
  EXPECT_EQ(broke[1], "0");
  ASSERT_TRUE(std::regex_search(
      text, resend,
      std::regex("the (\\d+) samples not received yet: (\\d+) owed when the stream ended, "
                 "(\\d+) requested on it after that")))
      << text;
  EXPECT_EQ(resend[1], "10");
  EXPECT_EQ(resend[2], "0");
  EXPECT_EQ(resend[3], "10");
}

}  // namespace
}  // namespace sophon
