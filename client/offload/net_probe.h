// Measures the achievable transfer rate from a storage server: raw samples are
// fetched and discarded, so neither side decodes anything and the figure is
// what the link (and the server's reads) can carry. Also measures what moving
// bytes costs the CPUs of both ends.
#ifndef SOPHON_CLIENT_OFFLOAD_NET_PROBE_H_
#define SOPHON_CLIENT_OFFLOAD_NET_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/loader/sample_client.h"

namespace sophon {

struct NetProbeOptions {
  int64_t max_samples = 512;                     // stop after this many samples ...
  absl::Duration max_time = absl::Seconds(3);    // ... or this long, whichever first
  uint64_t seed = 0;                             // which samples (a seeded sample of ids)
};

struct NetProbeResult {
  double bytes_per_second = 0;
  uint64_t bytes = 0;
  int64_t samples = 0;
  double seconds = 0;
  // CPU seconds this process spent while receiving (all threads, user +
  // system): the training node's cost of taking bytes off the network.
  double client_cpu_seconds = 0;
  // The storage node: wall time its prep workers spent reading the files, and
  // its process CPU beyond the prep workers' (gRPC, sending); -1 when the
  // server does not report its process CPU.
  double server_read_seconds = 0;
  double server_send_cpu_seconds = -1;
};

// The probe's part of the server's sending CPU: the server process's CPU over
// the probe (`process_cpu`) less what every client's samples took
// (`sample_cpu`) is the sending of every byte it sent (`all_bytes`); the probe
// is charged for its own `probe_bytes` of them. Alone on the server, all of
// it. (Charging the probe the whole difference counted other jobs' work as
// its sending: 280 ns a byte against 1.5 alone, with four jobs on one server.)
double ProbeSendCpuSeconds(double process_cpu, double sample_cpu, double all_bytes,
                           double probe_bytes);

// Errors name the server.
absl::StatusOr<NetProbeResult> ProbeBandwidth(SampleClient* client,
                                              const NetProbeOptions& options);

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_NET_PROBE_H_
