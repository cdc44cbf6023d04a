#include "sophon/net/refusal.h"

namespace sophon {

const char* RefusalName(Refusal refusal) {
  switch (refusal) {
    case Refusal::kInvalidRequest: return "invalid_request";
    case Refusal::kMaxRequestBytes: return "max_request_bytes";
    case Refusal::kMaxIdsPerRequest: return "max_ids_per_request";
    case Refusal::kMaxCropSize: return "max_crop_size";
    case Refusal::kMaxStreamInflightBytes: return "max_stream_inflight_bytes";
    case Refusal::kMaxStreams: return "max_streams";
    case Refusal::kMaxStreamsPerPeer: return "max_streams_per_peer";
    case Refusal::kIdleStreamTimeout: return "idle_stream_timeout";
    case Refusal::kWriteStallTimeout: return "write_stall_timeout";
    case Refusal::kStreamEvicted: return "max_streams_evicted";
    case Refusal::kDraining: return "draining";
    case Refusal::kMaxUnaryCallsPerPeer: return "max_unary_calls_per_peer";
    case Refusal::kMaxUnaryCalls: return "max_unary_calls";
    case Refusal::kReadStallTimeout: return "read_stall_timeout";
    case Refusal::kReadSlotTaken: return "max_reading_streams_taken";
  }
  return "unknown";
}

std::optional<Refusal> RefusalFromName(absl::string_view name) {
  for (int i = 0; i < kNumRefusals; ++i) {
    const Refusal r = static_cast<Refusal>(i);
    if (name == RefusalName(r)) return r;
  }
  return std::nullopt;
}

}  // namespace sophon
