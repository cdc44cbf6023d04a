#include "server/stream_activity.h"

#include <algorithm>

namespace sophon {

absl::Duration ClientIdleFor(const StreamActivity& activity, absl::Time now) {
  if (activity.writing) return std::max(absl::ZeroDuration(), now - activity.write_started);
  if (activity.server_busy) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), now - activity.last_activity);
}

}  // namespace sophon
