// Per-batch timings of a training run, written as CSV for stall analysis:
//   epoch,batch,samples,data_wait_s,copy_s,compute_s
// data_wait_s: the trainer blocked waiting for this batch; copy_s: host-to-
// device copy inside the step (0 where the trainer does not measure it, e.g.
// on cpu); compute_s: the rest of the step (with steps in flight on a GPU, the
// time the host took to queue it, any wait for an older step included).
#ifndef SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_
#define SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_

#include <cstdint>

namespace sophon {

inline constexpr char kBatchTimingsHeader[] = "epoch,batch,samples,data_wait_s,copy_s,compute_s";
inline constexpr char kBatchTimingsWhat[] = "batch timings";

class CsvLog;

// One line of the timings file.
void AddBatchTimings(CsvLog* log, int epoch, int64_t batch, int samples, double data_wait_seconds,
                     double copy_seconds, double compute_seconds);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_BATCH_TIMINGS_H_
