// The storage server's stats as Prometheus metrics on an HTTP /metrics endpoint.
#ifndef SOPHON_SERVER_METRICS_EXPORTER_H_
#define SOPHON_SERVER_METRICS_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sophon/v1/sophon.pb.h"

namespace prometheus {
struct MetricFamily;
}  // namespace prometheus

namespace sophon {

class HttpEndpoint;

struct MetricsOptions {
  std::string host = "127.0.0.1";  // address of the /metrics endpoint (plain HTTP, no auth)
  int port = -1;                   // -1 = no exporter; 0 picks a free port

  bool enabled() const { return port >= 0; }
  absl::Status Validate() const;
};

// A fresh copy of the server's stats; called on an HTTP thread at every
// scrape, so it must be thread-safe.
using StatsSnapshotFn = std::function<absl::StatusOr<v1::ServerStats>()>;

// The metric families of one snapshot: sophon_server_* counters and gauges
// (samples and bytes by stage, failures by reason, rejections by limit, prep
// busy time, queue, streams, memory in flight) and process_* (CPU time,
// resident memory, threads, open files). Stage labels come from the stage table.
std::vector<prometheus::MetricFamily> ServerStatsToMetrics(const v1::ServerStats& stats);
// process_resident_memory_bytes, process_threads, process_open_fds, read now.
std::vector<prometheus::MetricFamily> ProcessMetrics();

class MetricsExporter {
 public:
  // Listens on options.host:options.port (which must be enabled) and serves
  // GET /metrics (plain HTTP, one thread of its own: server/http_endpoint.h),
  // taking a snapshot per scrape. Errors name the address.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const MetricsOptions& options,
                                                                StatsSnapshotFn snapshot);
  // Stops the HTTP server and joins its thread.
  ~MetricsExporter();

  int port() const;             // the bound port (the chosen one for port 0)
  std::string address() const;  // host:port

 private:
  MetricsExporter() = default;

  std::string host_;
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_METRICS_EXPORTER_H_
