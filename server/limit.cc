#include "server/limit.h"

namespace sophon {

const char* LimitName(Limit limit) {
  switch (limit) {
    case Limit::kInvalidRequest: return "invalid_request";
    case Limit::kMaxRequestBytes: return "max_request_bytes";
    case Limit::kMaxIdsPerRequest: return "max_ids_per_request";
    case Limit::kMaxCropSize: return "max_crop_size";
    case Limit::kMaxStreamInflightBytes: return "max_stream_inflight_bytes";
    case Limit::kMaxStreams: return "max_streams";
    case Limit::kMaxStreamsPerPeer: return "max_streams_per_peer";
    case Limit::kIdleStreamTimeout: return "idle_stream_timeout";
    case Limit::kWriteStallTimeout: return "write_stall_timeout";
    case Limit::kStreamEvicted: return "max_streams_evicted";
    case Limit::kDraining: return "draining";
    case Limit::kMaxUnaryCallsPerPeer: return "max_unary_calls_per_peer";
    case Limit::kMaxUnaryCalls: return "max_unary_calls";
    case Limit::kReadStallTimeout: return "read_stall_timeout";
    case Limit::kReadSlotTaken: return "max_reading_streams_taken";
  }
  return "unknown";
}

}  // namespace sophon
