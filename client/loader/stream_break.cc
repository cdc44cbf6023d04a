#include "client/loader/stream_break.h"

#include <optional>

#include "sophon/net/refusal.h"

namespace sophon {
namespace {

// The server's own reason decides: it says which of its limits ended the
// stream, whatever the code and the message.
StreamBreakAction ForReason(Refusal reason) {
  switch (reason) {
    // No slot for the stream, or it gave its slot up to a client with fewer:
    // the same stream is admitted once others end.
    case Refusal::kMaxStreams:
    case Refusal::kMaxStreamsPerPeer:
    case Refusal::kStreamEvicted:
      return StreamBreakAction::kAwaitSlot;
    // The stream's state, not its requests: a new stream is served. A
    // draining server is gone soon (the loader asks a replica, see
    // FetchCall::ServerDraining). Unary-call limits never end a stream; they
    // pass with load, as slots do.
    case Refusal::kIdleStreamTimeout:
    case Refusal::kWriteStallTimeout:
    case Refusal::kReadStallTimeout:
    case Refusal::kReadSlotTaken:
    case Refusal::kDraining:
    case Refusal::kMaxUnaryCalls:
    case Refusal::kMaxUnaryCallsPerPeer:
      return StreamBreakAction::kRetry;
    // The requests themselves: the same requests are refused again.
    case Refusal::kInvalidRequest:
    case Refusal::kMaxRequestBytes:
    case Refusal::kMaxIdsPerRequest:
    case Refusal::kMaxCropSize:
    case Refusal::kMaxStreamInflightBytes:
      return StreamBreakAction::kFail;
  }
  return StreamBreakAction::kFail;
}

}  // namespace

// Without a reason the status came from gRPC or the transport (or from a
// server that predates the trailer), and the code decides:
//
// UNAVAILABLE: the connection failed or closed, or the server sent GOAWAY
// (gRPC's GOAWAY error carries grpc-status UNAVAILABLE) or refused the stream
// (RST_STREAM REFUSED_STREAM). CANCELLED: the server shut down with the call
// open, or reset it with RST_STREAM CANCEL. ABORTED: by convention, try again.
// All three: a new stream.
//
// RESOURCE_EXHAUSTED: gRPC under memory pressure sheds load. A peer whose
// resource quota runs out cancels a stream with HTTP/2 error
// ENHANCE_YOUR_CALM (chttp2's destructive reclaimer, "Buffers full"); the
// other side receives RST_STREAM with error code 11, which
// grpc_http2_error_to_grpc_status maps to RESOURCE_EXHAUSTED ("Received
// RST_STREAM with error code 11"), and no trailers at all. gRPC 1.51
// (Debian 12) and later map it so (src/core/lib/transport/status_conversion.cc,
// frame_rst_stream.cc); a GOAWAY with ENHANCE_YOUR_CALM ("too_many_pings")
// whose HTTP/2 code wins over its status surfaces the same way. Our server
// never refuses a request without its reason (FetchReactor attaches one to
// every refusal for a limit), so RESOURCE_EXHAUSTED without one is the
// transport shedding load: a new stream.
//
// One exception: gRPC refuses a message over its max_receive_message_size
// with RESOURCE_EXHAUSTED and no reason of ours either ("Received message
// larger than max", before the server sees it; "Sent message larger than
// max" on this side). The same request would be refused again, so a stream
// that carried a request larger than the least any server's gRPC accepts
// (kMinServerMessageLimitBytes) fails instead. The loader's messages are far
// smaller unless LoaderOptions.requests_per_message is made very large.
//
// Anything else (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED,
// FAILED_PRECONDITION, INTERNAL, ...): the same stream would fail again.
StreamBreakAction DecideStreamBreak(const StreamEnd& end) {
  if (!end.reason.empty()) {
    const std::optional<Refusal> reason = RefusalFromName(end.reason);
    if (reason.has_value()) return ForReason(*reason);
    // A reason this build does not know (a newer server's): only the codes
    // that always mean "try again" are retried; its own RESOURCE_EXHAUSTED
    // may be a limit on the requests, which retrying would meet forever.
  }
  switch (end.status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return StreamBreakAction::kRetry;
    case absl::StatusCode::kResourceExhausted:
      if (!end.reason.empty()) return StreamBreakAction::kFail;
      if (end.largest_request_bytes > kMinServerMessageLimitBytes) {
        return StreamBreakAction::kFail;
      }
      return StreamBreakAction::kRetry;
    default:
      return StreamBreakAction::kFail;
  }
}

const char* StreamBreakActionName(StreamBreakAction action) {
  switch (action) {
    case StreamBreakAction::kFail: return "fail";
    case StreamBreakAction::kAwaitSlot: return "await_slot";
    case StreamBreakAction::kRetry: return "retry";
  }
  return "unknown";
}

}  // namespace sophon
