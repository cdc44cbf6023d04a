// The limits a request or a stream can hit, by name.
#ifndef SOPHON_SERVER_LIMIT_H_
#define SOPHON_SERVER_LIMIT_H_

#include "sophon/net/refusal.h"

namespace sophon {

// Names of the limits a request or a stream can hit; each is the name of its
// ServiceOptions field (and the flag without dashes), reported to clients
// (the sophon-refusal trailer, sophon/net/refusal.h: the same enum, so that
// what the server counts and what it tells clients cannot drift apart), logs
// and metrics.
using Limit = Refusal;
inline constexpr int kNumLimits = kNumRefusals;
const char* LimitName(Limit limit);

}  // namespace sophon

#endif  // SOPHON_SERVER_LIMIT_H_
