#include "client/train/batch_timings.h"

#include "absl/strings/str_format.h"
#include "client/train/csv_log.h"

namespace sophon {

void AddBatchTimings(CsvLog* log, int epoch, int64_t batch, int samples, double data_wait_seconds,
                     double copy_seconds, double compute_seconds) {
  log->out() << absl::StrFormat("%d,%d,%d,%.6f,%.6f,%.6f\n", epoch, batch, samples,
                                data_wait_seconds, copy_seconds, compute_seconds);
}

}  // namespace sophon
