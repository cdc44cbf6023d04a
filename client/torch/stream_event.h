// A device event (c10's device-generic kind, recorded on a stream) as the
// CopyEvent that StagingRing and StepQueue wait on.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_STREAM_EVENT_H_
#define SOPHON_CLIENT_TORCH_STREAM_EVENT_H_

#include <c10/core/Event.h>

#include <utility>

#include "client/train/staging_ring.h"

namespace sophon {

class StreamEvent final : public CopyEvent {
 public:
  // REQUIRES: `event` recorded.
  explicit StreamEvent(c10::Event event) : event_(std::move(event)) {}
  bool Done() override { return event_.query(); }
  // LibTorch 1.13's generic event has no blocking wait: a short poll.
  void Wait() override;

 private:
  c10::Event event_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_STREAM_EVENT_H_
