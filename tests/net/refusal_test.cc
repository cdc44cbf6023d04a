// The reasons a storage server gives clients: names are the wire contract.
#include "sophon/net/refusal.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// The names on the wire, in enum order. Never change one: clients of other
// builds decide from them.
TEST(RefusalTest, NamesAreTheWireContract) {
  const char* const names[] = {
      "invalid_request",     "max_request_bytes",   "max_ids_per_request",
      "max_crop_size",       "max_stream_inflight_bytes", "max_streams",
      "max_streams_per_peer", "idle_stream_timeout", "write_stall_timeout",
      "max_streams_evicted", "draining",            "max_unary_calls_per_peer",
      "max_unary_calls",     "read_stall_timeout",  "max_reading_streams_taken",
  };
  static_assert(sizeof(names) / sizeof(names[0]) == kNumRefusals);
  for (int i = 0; i < kNumRefusals; ++i) {
    EXPECT_STREQ(RefusalName(static_cast<Refusal>(i)), names[i]) << i;
  }
}

TEST(RefusalTest, EveryNameIsUniqueAndReadBack) {
  std::set<std::string> seen;
  for (int i = 0; i < kNumRefusals; ++i) {
    const Refusal r = static_cast<Refusal>(i);
    EXPECT_TRUE(seen.insert(RefusalName(r)).second) << RefusalName(r);
    const std::optional<Refusal> back = RefusalFromName(RefusalName(r));
    ASSERT_TRUE(back.has_value()) << RefusalName(r);
    EXPECT_EQ(*back, r);
  }
}

TEST(RefusalTest, UnknownNamesAreNotReasons) {
  EXPECT_FALSE(RefusalFromName("").has_value());
  EXPECT_FALSE(RefusalFromName("unknown").has_value());
  EXPECT_FALSE(RefusalFromName("Max_Streams").has_value());
  EXPECT_FALSE(RefusalFromName("max_streams ").has_value());
}

}  // namespace
}  // namespace sophon
