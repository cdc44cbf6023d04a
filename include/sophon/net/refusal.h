// Why a storage server refused a call or ended a Fetch stream, as it tells
// the client: a machine-readable reason beside the status, so that the client
// decides from the code and the reason, never from the message's wording.
//
// Every stream the server ends or refuses with a non-OK status for a reason
// of its own carries the trailing metadata key kRefusalMetadataKey whose
// value is RefusalName(reason): the name of the limit it hit, which is the
// name of its ServiceOptions field (and of the flag, without dashes). The
// names are part of the wire contract: they never change, and a new reason
// gets a new name. Unary calls refused for a limit carry it too.
#ifndef SOPHON_NET_REFUSAL_H_
#define SOPHON_NET_REFUSAL_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace sophon {

// Trailing metadata key; its value is a RefusalName.
inline constexpr char kRefusalMetadataKey[] = "sophon-refusal";

// The limits a request or a stream can hit (the storage server's `Limit`).
// Values are indexes (counters per limit), not wire values: the wire carries
// the names.
enum class Refusal : int {
  kInvalidRequest = 0,     // not a limit: a malformed request
  kMaxRequestBytes,        // a Fetch request over max_request_bytes, or a unary one over its method's limit
  kMaxIdsPerRequest,
  kMaxCropSize,
  kMaxStreamInflightBytes,
  kMaxStreams,
  kMaxStreamsPerPeer,
  kIdleStreamTimeout,
  kWriteStallTimeout,
  kStreamEvicted,          // a full server made room for an address with fewer streams
  kDraining,               // not a limit: the server is draining before it stops
  kMaxUnaryCallsPerPeer,
  kMaxUnaryCalls,
  kReadStallTimeout,       // a read slot held with no request coming while others wait,
                           // or a unary call whose request did not arrive whole in time
  kReadSlotTaken,          // a stream arriving took the read slot of one not using it
};
inline constexpr int kNumRefusals = 15;

// The stable wire name ("max_streams", "write_stall_timeout", ...).
const char* RefusalName(Refusal refusal);
// The reason named `name`; nullopt for a name this build does not know (a
// newer server's).
std::optional<Refusal> RefusalFromName(absl::string_view name);

// The smallest request message any storage server's gRPC accepts: its
// ServiceOptions.max_request_bytes is at least 64 and gRPC takes 4 KiB more
// (kGrpcMessageSlackBytes). A larger message may be refused by gRPC itself,
// with no reason attached (see client/loader/stream_break.h).
inline constexpr int64_t kMinServerMessageLimitBytes = 64 + 4096;

}  // namespace sophon

#endif  // SOPHON_NET_REFUSAL_H_
