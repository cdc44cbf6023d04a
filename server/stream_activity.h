// Whose turn a Fetch stream is in, and so whether the client has left it idle.
// A pure function of the stream's state, so that every state (including the
// moments between two steps of the server's own work) is tested directly.
#ifndef SOPHON_SERVER_STREAM_ACTIVITY_H_
#define SOPHON_SERVER_STREAM_ACTIVITY_H_

#include "absl/time/time.h"

namespace sophon {

struct StreamActivity {
  // A response is outstanding (the client's turn to take it), since write_started.
  bool writing = false;
  absl::Time write_started;
  // The server owes the stream something: samples read but not yet admitted,
  // waiting for bytes, being prepared, or prepared but not yet written.
  bool server_busy = false;
  // The last request read or response taken.
  absl::Time last_activity;
};

// How long the client has kept the stream waiting at `now`: since the
// outstanding write started; zero while the server owes it work and nothing
// is outstanding; otherwise since the last activity.
absl::Duration ClientIdleFor(const StreamActivity& activity, absl::Time now);

}  // namespace sophon

#endif  // SOPHON_SERVER_STREAM_ACTIVITY_H_
