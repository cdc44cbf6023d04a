// Moves a loader batch onto the training device as tensors.
//
// On the CPU the tensors are views of the batch's buffers (no copy). On a
// CUDA device with staging slots, the batch's bytes are written into the next
// buffer of a ring of pinned host buffers (StagingRing: a buffer is rewritten
// only once the copy that last read it has completed) and copied with
// non_blocking on a side stream; the compute stream waits for the copy with
// an event, so the copy runs beside whatever the compute stream still has
// queued, and the host does not wait for it. Without slots (or on another
// device) the copy is a synchronous one from pageable memory.
//
// The CUDA path uses LibTorch's device-generic streams and events (c10), so
// it builds against Debian's CPU-only LibTorch, but runs only where LibTorch
// has CUDA.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_BATCH_UPLOAD_H_
#define SOPHON_CLIENT_TORCH_BATCH_UPLOAD_H_

#include <c10/core/Stream.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <unordered_map>

#include "client/torch/torch_step.h"
#include "client/train/staging_ring.h"
#include "sophon/data/batch.h"

namespace sophon {

// Not thread-safe: the trainer's thread uploads.
class BatchUploader {
 public:
  // `staging_slots` pinned buffers on a CUDA device (0: pageable copies on
  // the compute stream); ignored elsewhere.
  BatchUploader(const torch::Device& device, int staging_slots);
  // Waits for the copies in flight before the pinned buffers are freed.
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // As ToTensors (torch_step.h): images [n, c, h, w] float32 (uint8 crops
  // flipped where a CROPPED batch says and normalised on the device) and
  // labels [n] int64, on the device.
  // The batch's buffers are free for reuse when this returns.
  BatchTensors Upload(const Batch& batch, bool channels_last);

  // Whether uploads go through pinned buffers and the side stream.
  bool staged() const { return ring_ != nullptr; }
  // Uploads that waited for an earlier copy before reusing its buffer.
  int64_t waits() const { return ring_ == nullptr ? 0 : ring_->waits(); }

 private:
  BatchTensors UploadStaged(const Batch& batch, bool channels_last);

  const torch::Device device_;
  // The pinned buffers the ring hands out, by address (declared before the
  // ring: the ring's destructor gives them back).
  std::unordered_map<void*, torch::Tensor> pinned_;
  std::optional<c10::Stream> copy_stream_;
  std::unique_ptr<StagingRing> ring_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_BATCH_UPLOAD_H_
