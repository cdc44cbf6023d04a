// Counters of what a storage server has done; lock-free, thread-safe.
#ifndef SOPHON_SERVER_SERVER_STATS_H_
#define SOPHON_SERVER_SERVER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/fetch_request.h"
#include "sophon/ops/stage.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

class ServerStats {
 public:
  ServerStats() : start_(absl::Now()) {}

  // Counted by pipeline position here, by wire value in Snapshot.
  void RecordSample(Stage stage, uint64_t payload_bytes) {
    samples_[StageIndex(stage)].fetch_add(1, std::memory_order_relaxed);
    bytes_[StageIndex(stage)].fetch_add(payload_bytes, std::memory_order_relaxed);
  }
  // What one answered sample (failed ones too) cost the prep worker: the
  // figures it carries (Sample.server_wall_seconds, server_cpu_seconds,
  // server_read_seconds), summed in Snapshot's sample_*_seconds.
  void RecordSampleSeconds(double wall, double cpu, double read) {
    sample_wall_nanos_.fetch_add(Nanos(wall), std::memory_order_relaxed);
    sample_cpu_nanos_.fetch_add(Nanos(cpu), std::memory_order_relaxed);
    sample_read_nanos_.fetch_add(Nanos(read), std::memory_order_relaxed);
  }
  // A sample sent at an earlier stage than `asked` (the file cannot take it).
  void RecordDeclined(Stage asked) {
    declined_[StageIndex(asked)].fetch_add(1, std::memory_order_relaxed);
  }
  // A sample answered with an error instead of data.
  void RecordFailure(absl::StatusCode code);
  // A request or stream refused (the stream ends), by the limit it hit.
  void RecordRejection(Limit limit) {
    rejected_[static_cast<int>(limit)].fetch_add(1, std::memory_order_relaxed);
  }
  void StreamOpened() { streams_.fetch_add(1); }
  void StreamClosed() { streams_.fetch_sub(1); }
  void AddInflight(int delta) { inflight_.fetch_add(delta); }
  // Memory of request messages read but not yet admitted (CheckedSample
  // entries of the streams' pending queues).
  void AddPendingRequestBytes(int64_t delta) {
    pending_request_bytes_.fetch_add(delta, std::memory_order_relaxed);
  }
  void ObserveStreamInflight(uint32_t n);

  // Fills the counters; the caller adds the pool's, the budget's and the
  // registry's figures.
  void Snapshot(v1::ServerStats* out) const;

 private:
  static constexpr int kNumCodes = 17;  // absl::StatusCode values 0..16
  static int64_t Nanos(double seconds) {
    return seconds > 0 ? static_cast<int64_t>(seconds * 1e9) : 0;
  }

  const absl::Time start_;
  std::array<std::atomic<uint64_t>, kNumStages> samples_{};
  std::array<std::atomic<uint64_t>, kNumStages> bytes_{};
  std::array<std::atomic<uint64_t>, kNumStages> declined_{};
  std::array<std::atomic<uint64_t>, kNumCodes> failed_{};
  std::array<std::atomic<uint64_t>, kNumLimits> rejected_{};
  std::atomic<int32_t> streams_{0};
  std::atomic<int64_t> inflight_{0};
  std::atomic<int64_t> pending_request_bytes_{0};
  std::atomic<uint32_t> peak_stream_inflight_{0};
  std::atomic<int64_t> sample_wall_nanos_{0};
  std::atomic<int64_t> sample_cpu_nanos_{0};
  std::atomic<int64_t> sample_read_nanos_{0};
};

}  // namespace sophon

#endif  // SOPHON_SERVER_SERVER_STATS_H_
