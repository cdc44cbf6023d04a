// The limits a request or a stream can hit, by name.
#ifndef SOPHON_SERVER_LIMIT_H_
#define SOPHON_SERVER_LIMIT_H_

namespace sophon {

// Names of the limits a request or a stream can hit; each is the name of its
// ServiceOptions field (and the flag without dashes), reported to clients,
// logs and metrics.
enum class Limit : int {
  kInvalidRequest = 0,     // not a limit: a malformed request
  kMaxRequestBytes,
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
  kReadStallTimeout,       // a read slot held with no request coming while others wait
  kReadSlotTaken,          // a stream arriving took the read slot of one not using it
};
inline constexpr int kNumLimits = 15;
const char* LimitName(Limit limit);

}  // namespace sophon

#endif  // SOPHON_SERVER_LIMIT_H_
