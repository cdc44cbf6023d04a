// The machines an epoch runs on, as the cost model sees them.
#ifndef SOPHON_PLANNING_RESOURCES_H_
#define SOPHON_PLANNING_RESOURCES_H_

#include "absl/status/status.h"

namespace sophon {

// The machines an epoch runs on.
struct Resources {
  double net_bytes_per_s = 0;  // network bandwidth to this trainer, bytes/s; > 0
  // Storage node prep workers (its --prep-workers). >= 0; with 0 the storage
  // node can only send RAW.
  double remote_cpus = 4;
  // Storage node CPU seconds per training node CPU second for the same op. > 0.
  double remote_speed = 1.0;
  double local_cpus = 2;  // training node prep workers (--workers); > 0
  // Training node seconds per second of the CPU work the profile predicts for
  // it (its ops and its receive cost): above 1 when this node runs slower than
  // it did when profiled (other work on it, a slower clock). > 0.
  double local_speed = 1.0;
  // Training node CPU seconds per byte received (network stack, gRPC,
  // message parsing and copies), charged to the local CPUs beside the ops.
  // >= 0; 0 ignores it.
  double local_seconds_per_wire_byte = 0;
  // Storage node seconds per byte of file read (every sample is read, at any
  // stage) and per byte sent (gRPC, the network stack), charged to its CPUs
  // beside the ops: its threads that read and send share those CPUs with the
  // prep workers. >= 0; 0 ignores them.
  double remote_seconds_per_raw_byte = 0;
  double remote_seconds_per_wire_byte = 0;
  // Trainer step time per batch; >= 0, and 0 means the GPU never limits.
  double gpu_seconds_per_batch = 0;
  int batch_size = 256;  // samples per batch; > 0

  // The one place these values are checked. Names the offending field.
  absl::Status Validate() const;
};

// Bytes/s of a link of `mbit_per_s` megabits (10^6 bits) per second.
inline double MbitToBytesPerSecond(double mbit_per_s) { return mbit_per_s * 1e6 / 8; }

}  // namespace sophon

#endif  // SOPHON_PLANNING_RESOURCES_H_
