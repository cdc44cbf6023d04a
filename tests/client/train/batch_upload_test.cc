// BatchUploader on the CPU: whatever the staging slots, no staging (pinned
// buffers and streams are CUDA's), and the tensors are ToTensors' views of
// the batch's buffers, uint8 crops normalised as FinishOnDevice does. The
// staged path needs a CUDA device; StagingRing's reuse rule is tested on
// its own (staging_ring_test).
#include "client/train/batch_upload.h"

#include <torch/types.h>

#include "client/train/device_ops.h"
#include "gtest/gtest.h"
#include "sophon/emulation/synthetic_batch.h"

namespace sophon {
namespace {

TEST(BatchUploaderTest, CpuBatchesAreViewsWhateverTheSlots) {
  for (int slots : {0, 2}) {
    BatchUploader uploader(torch::Device(torch::kCPU), slots);
    EXPECT_FALSE(uploader.staged());
    const Batch batch = MakeSyntheticBatch(4, 8, 3, 1);
    const BatchTensors t = uploader.Upload(batch, /*channels_last=*/false);
    EXPECT_EQ(t.images.data_ptr(), static_cast<const void*>(batch.images.data()));
    EXPECT_EQ(t.images.sizes(), (std::vector<int64_t>{4, 3, 8, 8}));
    EXPECT_EQ(t.labels.data_ptr(), static_cast<const void*>(batch.labels.data()));
    EXPECT_EQ(uploader.waits(), 0);
  }
}

TEST(BatchUploaderTest, CropsAreNormalisedAndChannelsLastIsHonoured) {
  BatchUploader uploader(torch::Device(torch::kCPU), 2);
  const Batch batch = MakeSyntheticBatch(3, 6, 3, 2, Stage::kFlipped);
  const BatchTensors t = uploader.Upload(batch, /*channels_last=*/true);
  const torch::Tensor crops = torch::from_blob(const_cast<uint8_t*>(batch.pixels.data()),
                                               {3, 6, 6, 3}, torch::kUInt8);
  EXPECT_TRUE(torch::equal(t.images, FinishOnDevice(crops)));
  EXPECT_TRUE(t.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(t.labels.sizes(), (std::vector<int64_t>{3}));
}

}  // namespace
}  // namespace sophon
