// What the loader does when a Fetch stream ends with an error: decided from
// the status code and the reason the storage server attached (the
// sophon-refusal trailer, sophon/net/refusal.h), never from the message's
// wording, which gRPC and the server may change at will.
#ifndef SOPHON_CLIENT_LOADER_STREAM_BREAK_H_
#define SOPHON_CLIENT_LOADER_STREAM_BREAK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sophon {

enum class StreamBreakAction {
  // The same requests would be refused again (a request over the server's
  // limits, a malformed request, permissions, a reason this build does not
  // know): the epoch ends with the status.
  kFail,
  // The server had no stream slot for this client (its max_streams or
  // max_streams_per_peer) or evicted the stream to make room: a new stream
  // once others end, tried with backoff up to ClientOptions.connect_timeout
  // when the stream delivered nothing.
  kAwaitSlot,
  // A break the stream may recover from: the transport failed or shed load,
  // the server went away, restarts or drains, or it ended the stream for the
  // stream's state (idle, a write not taken, a read slot held or taken
  // back), not its requests: a new stream after a backoff.
  kRetry,
};

// What a Fetch stream's end tells the loader.
struct StreamEnd {
  absl::Status status;           // the stream's final status (not OK)
  absl::string_view reason;      // the sophon-refusal trailer; empty when none
  int64_t largest_request_bytes = 0;  // the largest request message written on it
};

// The decision; pure, for any status and reason.
StreamBreakAction DecideStreamBreak(const StreamEnd& end);

const char* StreamBreakActionName(StreamBreakAction action);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_STREAM_BREAK_H_
