// How a storage node that is draining before it stops tells its clients.
//
// On SIGTERM a server reports NOT_SERVING on the standard health service,
// refuses new Fetch streams, stops reading requests on its open ones,
// finishes the samples it has started and ends each stream with UNAVAILABLE
// and the trailing metadata key below. Samples a stream asked for and never
// received are handed back: the client asks a replica for them at once
// instead of waiting for the server to come back.
#ifndef SOPHON_NET_DRAINING_H_
#define SOPHON_NET_DRAINING_H_

namespace sophon {

// Trailing metadata key (value "1") on a stream ended by a draining server.
inline constexpr char kDrainingMetadataKey[] = "sophon-draining";

}  // namespace sophon

#endif  // SOPHON_NET_DRAINING_H_
