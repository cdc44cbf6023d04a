#include "server/stream_activity.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(StreamActivityTest, AnOutstandingWriteCountsFromItsStartWhateverElseIsOwed) {
  StreamActivity a;
  a.writing = true;
  a.write_started = kT0;
  a.server_busy = true;  // more samples being prepared do not excuse an untaken write
  a.last_activity = kT0 - absl::Hours(1);
  EXPECT_EQ(ClientIdleFor(a, kT0 + absl::Seconds(7)), absl::Seconds(7));
}

TEST(StreamActivityTest, TheServersTurnIsNeverIdleHoweverLongItLasts) {
  // Samples read but not admitted, waiting for bytes, being prepared, or
  // ready but not yet written: each is the server's turn. In particular the
  // moment after a sample is prepared and before its write starts.
  StreamActivity a;
  a.server_busy = true;
  a.last_activity = kT0;
  EXPECT_EQ(ClientIdleFor(a, kT0 + absl::Hours(2)), absl::ZeroDuration());
}

TEST(StreamActivityTest, NothingOwedAndNothingOutstandingCountsFromTheLastActivity) {
  StreamActivity a;
  a.last_activity = kT0;
  EXPECT_EQ(ClientIdleFor(a, kT0 + absl::Seconds(3)), absl::Seconds(3));
  EXPECT_EQ(ClientIdleFor(a, kT0 - absl::Seconds(3)), absl::ZeroDuration());  // clock skew
}

}  // namespace
}  // namespace sophon
