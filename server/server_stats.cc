#include "server/server_stats.h"

namespace sophon {

void ServerStats::ObserveStreamInflight(uint32_t n) {
  uint32_t peak = peak_stream_inflight_.load(std::memory_order_relaxed);
  while (n > peak && !peak_stream_inflight_.compare_exchange_weak(peak, n)) {
  }
}

void ServerStats::Snapshot(v1::ServerStats* out) const {
  out->clear_samples_by_stage();
  out->clear_bytes_by_stage();
  for (int i = 0; i < kNumStages; ++i) {
    out->add_samples_by_stage(samples_[i].load(std::memory_order_relaxed));
    out->add_bytes_by_stage(bytes_[i].load(std::memory_order_relaxed));
  }
  out->set_samples_failed(failed_.load(std::memory_order_relaxed));
  out->set_requests_rejected(rejected_.load(std::memory_order_relaxed));
  out->set_active_streams(static_cast<uint32_t>(std::max(0, streams_.load())));
  out->set_inflight_samples(static_cast<uint32_t>(std::max<int64_t>(0, inflight_.load())));
  out->set_peak_stream_inflight(peak_stream_inflight_.load());
  out->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
}

}  // namespace sophon
