// The loader's memory bound (LoaderOptions.prefetch_batches, sophon-train
// --prefetch-batches), checked against a real sophon-server on 127.0.0.1
// (port 0): with P = prefetch_batches, B = batch_size and S = crop size, the
// loader holds at most 2P + 1 image buffers of B * 12 * S^2 bytes (P + 2
// while the caller hands its previous batch back to Next) and at most the
// payloads of the P requested batches waiting for its prep threads.
#include <algorithm>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "server/storage_server.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

class LoaderMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = 30;  // 60 samples: 12 batches of 5
    ServiceOptions service;
    service.prep_workers = 2;
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(testing::MakeTestDataset("loader_memory", dopts), std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
  }

  // One epoch; `recycle`: the caller hands its previous batch back to every
  // Next (as the train loop does); otherwise every call brings a buffer of
  // its own (the worst case: spares fill up to P).
  LoaderEpochStats RunEpoch(Stage stage, bool recycle) {
    FixedPolicy policy(stage, "fixed");
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options_, &policy);
    EXPECT_TRUE(loader.ok()) << loader.status();
    if (!loader.ok()) return {};
    EXPECT_TRUE((*loader)->StartEpoch(0).ok());
    Batch reused;
    int batches = 0;
    while (true) {
      Batch own;
      own.images.reserve(BatchFloats());
      Batch* b = recycle ? &reused : &own;
      absl::StatusOr<bool> more = (*loader)->Next(b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      ++batches;
    }
    EXPECT_EQ(batches, 12);
    return (*loader)->stats();
  }

  size_t BatchFloats() const {
    const size_t s = options_.pipeline.augment.crop_size;
    return static_cast<size_t>(options_.batch_size) * 3 * s * s;
  }

  LoaderOptions options_ = [] {
    LoaderOptions o;
    o.batch_size = 5;
    o.workers = 2;
    o.prefetch_batches = 3;
    o.pipeline.augment.crop_size = 40;
    return o;
  }();
  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

TEST_F(LoaderMemoryTest, BatchBuffersAndQueuedPayloadsStayWithinTheDocumentedBound) {
  const int p = options_.prefetch_batches;
  const uint64_t b = options_.batch_size;
  const uint64_t s = options_.pipeline.augment.crop_size;
  uint64_t max_raw = 0;
  for (uint64_t size : client_->manifest().raw_sizes) max_raw = std::max<uint64_t>(max_raw, size);
  struct Case {
    Stage stage;
    uint64_t payload;  // most bytes of one sample's payload
  };
  for (const Case& c : {Case{Stage::kTensor, 12 * s * s}, Case{Stage::kCropped, 3 * s * s},
                        Case{Stage::kRaw, max_raw}}) {
    for (bool recycle : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << StageName(c.stage) << (recycle ? ", batches handed back" : ", own buffers"));
      const LoaderEpochStats stats = RunEpoch(c.stage, recycle);
      // Within the documented bound (how close the peak comes to it depends
      // on how far the loader gets ahead of this consumer: not checked).
      EXPECT_GE(stats.peak_batch_buffers, 1);
      EXPECT_LE(stats.peak_batch_buffers, recycle ? p + 2 : 2 * p + 1);
      EXPECT_GT(stats.peak_queued_payload_bytes, 0u);
      EXPECT_LE(stats.peak_queued_payload_bytes, p * b * c.payload);
    }
  }
}

}  // namespace
}  // namespace sophon
