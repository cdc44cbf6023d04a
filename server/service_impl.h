// The storage node's service logic. Methods take a request, fill a response
// and return a Status; no gRPC types, so it is testable without a network.
// grpc_service.h adapts it to gRPC.
#ifndef SOPHON_SERVER_SERVICE_IMPL_H_
#define SOPHON_SERVER_SERVICE_IMPL_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "server/prep_pool.h"
#include "server/server_stats.h"
#include "sophon/data/sample_source.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/pipeline.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

// One Fetch stream as the service sees it. Read blocks until a request
// arrives or the peer half-closes (false). Write blocks under flow control
// and returns false once the peer is gone.
class FetchStream {
 public:
  virtual ~FetchStream() = default;
  virtual bool Read(v1::FetchRequest* request) = 0;
  virtual bool Write(const v1::FetchResponse& response) = 0;
};

struct ServiceOptions {
  int prep_workers = 4;              // threads that decode/transform; >= 1
  int max_inflight_per_stream = 128; // samples accepted but not yet written, per stream
  // CPUs of time this server may use, as reported to clients for planning;
  // 0 = detected (CPU affinity capped by a cgroup quota).
  double cpu_limit = 0;
  int max_samples_per_message = 16;  // samples batched into one FetchResponse
  int64_t max_message_bytes = 4 << 20;  // payload bytes per FetchResponse (>= 1 sample)
  DecodeLimits limits;
  // For tests: runs on the prep worker before each sample (may block, e.g.
  // to hold samples back while the server is shut down). Empty in production.
  std::function<void(uint64_t id)> before_prep;

  absl::Status Validate() const;
};

class SampleServiceImpl {
 public:
  // REQUIRES: options validated. `source` must outlive this object; the
  // service reads samples only through it.
  SampleServiceImpl(const SampleSource* source, const ServiceOptions& options);

  absl::Status GetManifest(const v1::GetManifestRequest& request, v1::Manifest* response);
  absl::Status GetStats(const v1::GetStatsRequest& request, v1::ServerStats* response);
  // Serves one stream until the peer half-closes and everything requested has
  // been written. Bad requests end the stream: OUT_OF_RANGE for an id outside
  // the manifest, INVALID_ARGUMENT for bad augmentation parameters. A sample
  // that fails (corrupt file) is sent with its error; the stream goes on.
  // Thread-safe: any number of streams at once share the prep pool.
  absl::Status Fetch(FetchStream* stream);

  const ServerStats& stats() const { return stats_; }
  const PrepPool& pool() const { return pool_; }

 private:
  // Runs in a prep worker: read, process to `target`, fill `out`.
  void ProcessSample(uint64_t id, Stage target, const SampleKey& key,
                     const PipelineOptions& options, v1::Sample* out);

  const SampleSource* const source_;
  const ServiceOptions options_;
  ServerStats stats_;
  PrepPool pool_;  // last: joined first on destruction
};

}  // namespace sophon

#endif  // SOPHON_SERVER_SERVICE_IMPL_H_
