#include "client/torch/batch_upload.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/types.h>

#include <cstring>
#include <utility>

#include "client/torch/device_ops.h"
#include "client/torch/stream_event.h"

namespace sophon {
namespace {

// `bytes` rounded up to a boundary that suits any element type: where the
// labels start in a staging buffer, after the images (the flip flags follow
// the labels).
size_t AlignedOffset(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

BatchUploader::BatchUploader(const torch::Device& device, int staging_slots) : device_(device) {
  if (!device_.is_cuda() || staging_slots < 1) return;
  const c10::impl::VirtualGuardImpl guard(device_.type());
  copy_stream_ = guard.getStreamFromGlobalPool(device_);
  ring_ = std::make_unique<StagingRing>(
      staging_slots,
      [this](size_t bytes) {
        torch::Tensor buffer =
            torch::empty({static_cast<int64_t>(bytes)},
                         torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
        void* data = buffer.data_ptr();
        pinned_.emplace(data, std::move(buffer));
        return data;
      },
      [this](void* data, size_t) { pinned_.erase(data); });
}

BatchUploader::~BatchUploader() {
  ring_.reset();  // waits for the copies in flight, then frees the buffers
}

BatchTensors BatchUploader::Upload(const Batch& batch, bool channels_last) {
  if (ring_ == nullptr) return ToTensors(batch, device_, channels_last);
  return UploadStaged(batch, channels_last);
}

BatchTensors BatchUploader::UploadStaged(const Batch& batch, bool channels_last) {
  const bool crops = batch.stage == Stage::kFlipped || batch.stage == Stage::kCropped;
  const bool flips = batch.stage == Stage::kCropped;
  const size_t image_bytes =
      crops ? batch.pixels.size() : batch.images.size() * sizeof(float);
  const size_t labels_offset = AlignedOffset(image_bytes);
  const size_t label_bytes = batch.labels.size() * sizeof(int64_t);
  const size_t flips_offset = labels_offset + label_bytes;
  const size_t flip_bytes = flips ? batch.flips.size() : 0;
  // Waits, if need be, for the copy that last read this buffer.
  const StagingRing::Slot slot = ring_->Acquire(flips_offset + flip_bytes);
  auto* bytes = static_cast<uint8_t*>(slot.data);
  std::memcpy(bytes, crops ? static_cast<const void*>(batch.pixels.data())
                           : static_cast<const void*>(batch.images.data()),
              image_bytes);
  std::memcpy(bytes + labels_offset, batch.labels.data(), label_bytes);
  if (flips) std::memcpy(bytes + flips_offset, batch.flips.data(), flip_bytes);

  // Views of the pinned buffer, so that LibTorch's copy knows it is pinned.
  const torch::Tensor& buffer = pinned_.at(slot.data);
  const torch::Tensor host_images =
      crops ? buffer.narrow(0, 0, static_cast<int64_t>(image_bytes))
                  .view({batch.n, batch.h, batch.w, batch.c})
            : buffer.narrow(0, 0, static_cast<int64_t>(image_bytes))
                  .view(torch::kFloat32)
                  .view({batch.n, batch.c, batch.h, batch.w});
  const torch::Tensor host_labels =
      buffer.narrow(0, static_cast<int64_t>(labels_offset), static_cast<int64_t>(label_bytes))
          .view(torch::kInt64);
  const torch::Tensor host_flips =
      flips ? buffer.narrow(0, static_cast<int64_t>(flips_offset), static_cast<int64_t>(flip_bytes))
            : torch::Tensor();

  const c10::impl::VirtualGuardImpl guard(device_.type());
  const c10::Stream compute = guard.getStream(device_);
  BatchTensors tensors;
  torch::Tensor device_flips;
  {
    // The device memory comes from the copy stream's pool.
    const c10::StreamGuard on_copy_stream(*copy_stream_);
    tensors.images = host_images.to(host_images.options().device(device_), /*non_blocking=*/true);
    tensors.labels = host_labels.to(host_labels.options().device(device_), /*non_blocking=*/true);
    if (flips) {
      device_flips = host_flips.to(host_flips.options().device(device_), /*non_blocking=*/true);
    }
  }
  // The compute stream's next work waits for the copy; the host does not.
  // The same event tells the ring when the pinned buffer is free again.
  c10::Event copied(device_.type());
  copied.record(*copy_stream_);
  copied.block(compute);
  // The tensors are used (and freed) on the compute stream: the allocator
  // must not hand their memory to the copy stream again before that work
  // has run.
  guard.recordDataPtrOnStream(tensors.images.storage().data_ptr(), compute);
  guard.recordDataPtrOnStream(tensors.labels.storage().data_ptr(), compute);
  if (flips) guard.recordDataPtrOnStream(device_flips.storage().data_ptr(), compute);
  ring_->Release(std::make_unique<StreamEvent>(std::move(copied)));

  if (crops) {
    tensors.images =
        FinishOnDevice(tensors.images, flips ? device_flips.to(torch::kBool) : torch::Tensor());
  }
  if (channels_last && batch.stage != Stage::kFeatures) {
    tensors.images = tensors.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
  return tensors;
}

}  // namespace sophon
