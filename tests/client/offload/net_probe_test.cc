#include "client/offload/net_probe.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

// Alone on the server: the probe is charged all of the server's CPU beyond
// its samples, as before.
TEST(ProbeSendCpuSecondsTest, AloneTheProbeIsChargedAllTheSending) {
  EXPECT_DOUBLE_EQ(ProbeSendCpuSeconds(0.066, 0.060, 4.2e6, 4.2e6), 0.066 - 0.060);
  EXPECT_DOUBLE_EQ(ProbeSendCpuSeconds(0.05, 0.06, 4.2e6, 4.2e6), 0.0);  // never negative
}

// Measured (tools/bench/node-jobs, four jobs on one server with one prep
// worker): over one job's probe the server's process CPU rose 1.19 s, of
// which every client's samples took 1.11 s, and it sent 52 MB in all, 4.2 MB
// of them the probe's. Charged the whole 1.19 s less its own samples, the
// probe measured 281 ns of sending a byte against 1.5 alone; its share of
// the sending is about 1.5 ns.
TEST(ProbeSendCpuSecondsTest, OtherClientsWorkIsNotThisProbesSending) {
  const double per_byte = ProbeSendCpuSeconds(1.19, 1.11, 52e6, 4.2e6) / 4.2e6;
  EXPECT_LT(per_byte, 5e-9);
  EXPECT_NEAR(per_byte, 0.08 / 52e6, 1e-12);
}

}  // namespace
}  // namespace sophon
