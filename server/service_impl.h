// The storage node's service state and logic shared by every call: the
// manifest, the stats, the prep pool, the byte budget, the read slots and the
// stream registry, and the preparation of one sample. No gRPC types: grpc_service.h
// and fetch_reactor.h adapt it to gRPC.
#ifndef SOPHON_SERVER_SERVICE_IMPL_H_
#define SOPHON_SERVER_SERVICE_IMPL_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/byte_budget.h"
#include "server/fetch_request.h"
#include "server/manifest_pages.h"
#include "server/prep_pool.h"
#include "server/read_slots.h"
#include "server/server_stats.h"
#include "server/service_options.h"
#include "server/stream_registry.h"
#include "server/unary_calls.h"
#include "sophon/base/memory_releaser.h"
#include "server/once_per_sample.h"
#include "sophon/base/rate_limiter.h"
#include "sophon/data/cached_source.h"
#include "sophon/data/sample_source.h"
#include "sophon/ops/pipeline.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

class SampleServiceImpl {
 public:
  // REQUIRES: options validated. `source` must outlive this object; the
  // service reads samples only through it. When `source` is a CachedSource,
  // GetStats reports its counts (ServerStats.cache_*).
  SampleServiceImpl(const SampleSource* source, const ServiceOptions& options);

  // The manifest's header and pages, encoded when the service was made (it
  // never changes while serving). Thread-safe.
  const ManifestPages& manifest_pages() const { return manifest_pages_; }
  absl::Status GetStats(const v1::GetStatsRequest& request, v1::ServerStats* response);

  // Runs in a prep worker: read sample `key.id`, process it to `target`, fill
  // `out` (with its error if it fails; errors name the sample and its path).
  // A payload over `reserved_bytes` (a RAW file that grew since the dataset
  // was listed) fails the sample: the server never holds more than it
  // reserved.
  // `id` is the sample's id in this server's manifest; `key` keys its
  // augmentation (key.id is its id in the client's global manifest).
  void ProcessSample(Stage target, uint64_t id, const SampleKey& key,
                     const PipelineOptions& options, int64_t reserved_bytes, v1::Sample* out);
  // Fills `out` as sample `id` at `stage` answered with `error` instead of
  // data, and counts the failure.
  void FailSample(uint64_t id, Stage stage, const absl::Status& error, v1::Sample* out);
  // Counts a refused request or stream and logs it (rate-limited).
  void RecordRejection(Limit limit, const std::string& peer, const absl::Status& status);

  // Logs the end of a stream: at info level at most 20 lines per 10 s (with
  // the count of lines left out), every line at debug level.
  void LogStreamEnd(const std::string& line);
  // The service's clock (ServiceOptions.clock, or absl::Now).
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }

  const SampleSource& source() const { return *source_; }
  const ServiceOptions& options() const { return options_; }
  ServerStats& stats() { return stats_; }
  PrepPool& pool() { return pool_; }
  ByteBudget& budget() { return budget_; }
  const MemoryReleaser& memory_releaser() const { return memory_releaser_; }
  ReadSlots& read_slots() { return read_slots_; }
  StreamRegistry& registry() { return registry_; }
  UnaryCalls& unary_calls() { return unary_calls_; }

 private:
  const SampleSource* const source_;
  const CachedSource* const cache_;  // source_ when it is a cache, else null
  const ServiceOptions options_;
  const ManifestPages manifest_pages_;
  ServerStats stats_;
  MemoryReleaser memory_releaser_;  // told when samples and unary calls have all drained
  // Sources of work the releaser waits out: budget_ busy, unary_calls_ busy.
  std::atomic<int> busy_sources_{0};
  void OnBusyChange(bool busy);
  ByteBudget budget_;
  ReadSlots read_slots_;  // streams call it: outlives the registry's reaper
  UnaryCalls unary_calls_;
  RateLimiter rejection_log_{10, absl::Seconds(10)};
  RateLimiter failure_log_{20, absl::Seconds(10)};  // failed samples: a client can repeat them
  RateLimiter stream_log_{20, absl::Seconds(10)};   // stream ends: a client can churn streams
  // Files sent at an earlier stage than asked (not croppable losslessly):
  // logged once per file, and at most 20 files per 10 s.
  OncePerSample declined_files_;
  RateLimiter declined_log_{20, absl::Seconds(10)};
  StreamRegistry registry_;  // its reaper calls streams: joined before they go
  PrepPool pool_;            // last: joined first on destruction
};

}  // namespace sophon

#endif  // SOPHON_SERVER_SERVICE_IMPL_H_
