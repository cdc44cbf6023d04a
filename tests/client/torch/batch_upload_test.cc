// BatchUploader on the CPU: whatever the staging slots, no staging (pinned
// buffers and streams are CUDA's), and the tensors are ToTensors' views of
// the batch's buffers, uint8 crops normalised as FinishOnDevice does. The
// staged path needs a CUDA device; StagingRing's reuse rule is tested on
// its own (staging_ring_test).
#include "client/torch/batch_upload.h"

#include <torch/types.h>

#include "client/torch/device_ops.h"
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

  // CROPPED: flipped by the batch's flags (every other sample) first.
  const Batch cropped = MakeSyntheticBatch(3, 6, 3, 2, Stage::kCropped);
  ASSERT_EQ(cropped.flips, (std::vector<uint8_t>{0, 1, 0}));
  const torch::Tensor flips = torch::tensor({false, true, false});
  EXPECT_TRUE(torch::equal(uploader.Upload(cropped, /*channels_last=*/false).images,
                           FinishOnDevice(crops, flips)));
  EXPECT_FALSE(torch::equal(FinishOnDevice(crops, flips), FinishOnDevice(crops)));
}

}  // namespace
}  // namespace sophon
