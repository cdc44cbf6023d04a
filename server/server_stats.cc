#include "server/server_stats.h"

#include <algorithm>
#include <string>

#include "sophon/net/wire.h"

namespace sophon {

void ServerStats::RecordFailure(absl::StatusCode code) {
  const int i = static_cast<int>(code);
  failed_[i >= 0 && i < kNumCodes ? i : static_cast<int>(absl::StatusCode::kUnknown)].fetch_add(
      1, std::memory_order_relaxed);
}

void ServerStats::ObserveStreamInflight(uint32_t n) {
  uint32_t peak = peak_stream_inflight_.load(std::memory_order_relaxed);
  while (n > peak && !peak_stream_inflight_.compare_exchange_weak(peak, n)) {
  }
}

void ServerStats::Snapshot(v1::ServerStats* out) const {
  out->clear_samples_by_stage();
  out->clear_bytes_by_stage();
  out->clear_declined_by_stage();
  for (int i = 0; i < kNumStages; ++i) {
    out->add_samples_by_stage(0);
    out->add_bytes_by_stage(0);
  }
  for (Stage stage : AllStages()) {
    const int wire = StageToProto(stage);  // the lists are indexed by wire value
    out->set_samples_by_stage(wire, samples_[StageIndex(stage)].load(std::memory_order_relaxed));
    out->set_bytes_by_stage(wire, bytes_[StageIndex(stage)].load(std::memory_order_relaxed));
    const uint64_t declined = declined_[StageIndex(stage)].load(std::memory_order_relaxed);
    if (declined > 0) (*out->mutable_declined_by_stage())[StageName(stage)] = declined;
  }
  uint64_t failed = 0;
  out->clear_failures_by_reason();
  for (int i = 0; i < kNumCodes; ++i) {
    const uint64_t n = failed_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    failed += n;
    (*out->mutable_failures_by_reason())[absl::StatusCodeToString(
        static_cast<absl::StatusCode>(i))] = n;
  }
  out->set_samples_failed(failed);
  uint64_t rejected = 0;
  out->clear_rejections_by_limit();
  for (int i = 0; i < kNumLimits; ++i) {
    const uint64_t n = rejected_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    rejected += n;
    (*out->mutable_rejections_by_limit())[LimitName(static_cast<Limit>(i))] = n;
  }
  out->set_requests_rejected(rejected);
  out->set_active_streams(static_cast<uint32_t>(std::max(0, streams_.load())));
  out->set_inflight_samples(static_cast<uint32_t>(std::max<int64_t>(0, inflight_.load())));
  out->set_peak_stream_inflight(peak_stream_inflight_.load());
  out->set_pending_request_bytes(
      static_cast<uint64_t>(std::max<int64_t>(0, pending_request_bytes_.load())));
  out->set_sample_wall_seconds(sample_wall_nanos_.load(std::memory_order_relaxed) * 1e-9);
  out->set_sample_cpu_seconds(sample_cpu_nanos_.load(std::memory_order_relaxed) * 1e-9);
  out->set_sample_read_seconds(sample_read_nanos_.load(std::memory_order_relaxed) * 1e-9);
  out->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
}

}  // namespace sophon
