#include "server/metrics_exporter.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"
#include "server/http_endpoint.h"
#include "sophon/base/process_status.h"
#include "sophon/net/wire.h"
#include "sophon/ops/stage.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void Add(MetricFamily* family, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (family->type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family->metric.push_back(std::move(metric));
}

MetricFamily Single(std::string name, std::string help, MetricType type, double value) {
  MetricFamily family = Family(std::move(name), std::move(help), type);
  Add(&family, value);
  return family;
}

// One series per map entry, sorted by label; `total` (the proto's overall
// count) above the entries' sum shows as label value "unknown", so the series
// always add up to the total.
MetricFamily ByLabel(std::string name, std::string help, const std::string& label,
                     const google::protobuf::Map<std::string, uint64_t>& counts,
                     uint64_t total) {
  std::map<std::string, uint64_t> sorted(counts.begin(), counts.end());
  uint64_t sum = 0;
  for (const auto& [key, n] : sorted) sum += n;
  if (total > sum) sorted["unknown"] += total - sum;
  MetricFamily family = Family(std::move(name), std::move(help), MetricType::Counter);
  for (const auto& [key, n] : sorted) Add(&family, static_cast<double>(n), {{label, key}});
  return family;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace

absl::Status MetricsOptions::Validate() const {
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MetricsOptions.port must be -1 (off), 0 (a free port) or in [1, 65535], got ", port));
  }
  if (enabled() && host.empty()) {
    return absl::InvalidArgumentError("MetricsOptions.host is required when metrics are on");
  }
  if (host.find_first_of(", \t\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("MetricsOptions.host must be one address, got '", host, "'"));
  }
  return absl::OkStatus();
}

std::vector<MetricFamily> ServerStatsToMetrics(const v1::ServerStats& stats) {
  std::vector<MetricFamily> out;
  MetricFamily samples = Family("sophon_server_samples_total",
                                "Samples sent, by the stage they were sent at.",
                                MetricType::Counter);
  MetricFamily bytes = Family("sophon_server_bytes_total",
                              "Payload bytes sent, by the stage they were sent at.",
                              MetricType::Counter);
  for (Stage stage : AllStages()) {
    const std::vector<ClientMetric::Label> labels = {{"stage", StageName(stage)}};
    Add(&samples, StatsSamplesAt(stats, stage), labels);
    Add(&bytes, StatsBytesAt(stats, stage), labels);
  }
  out.push_back(std::move(samples));
  out.push_back(std::move(bytes));
  out.push_back(ByLabel("sophon_server_samples_declined_total",
                        "Samples sent at an earlier stage than asked for because the file "
                        "cannot take it (a JPEG that cannot be cropped losslessly is sent "
                        "whole), by the stage asked for.",
                        "stage", stats.declined_by_stage(), 0));
  out.push_back(ByLabel("sophon_server_sample_failures_total",
                        "Samples that failed (read, decode or prep), by reason.", "reason",
                        stats.failures_by_reason(), stats.samples_failed()));
  out.push_back(ByLabel("sophon_server_rejections_total",
                        "Requests or streams refused for a server limit, by limit.", "limit",
                        stats.rejections_by_limit(), 0));
  out.push_back(Single("sophon_server_requests_rejected_total",
                       "Fetch streams ended for a bad request.", MetricType::Counter,
                       stats.requests_rejected()));
  out.push_back(Single("sophon_server_streams_opened_total", "Fetch streams accepted.",
                       MetricType::Counter, stats.streams_opened()));
  out.push_back(Single("sophon_server_prep_busy_seconds_total",
                       "Seconds prep workers spent preparing samples, summed over workers.",
                       MetricType::Counter, stats.prep_busy_seconds()));
  out.push_back(Single("sophon_server_prep_workers", "Prep worker threads.", MetricType::Gauge,
                       stats.prep_workers()));
  out.push_back(Single("sophon_server_queue_depth", "Prep jobs waiting for a worker.",
                       MetricType::Gauge, stats.queue_depth()));
  out.push_back(Single("sophon_server_active_streams", "Fetch streams open now.",
                       MetricType::Gauge, stats.active_streams()));
  out.push_back(Single("sophon_server_inflight_samples",
                       "Samples accepted and not yet written, all streams.", MetricType::Gauge,
                       stats.inflight_samples()));
  out.push_back(Single("sophon_server_inflight_bytes",
                       "Bytes reserved for samples accepted and not yet written, all streams.",
                       MetricType::Gauge, stats.inflight_bytes()));
  out.push_back(Single("sophon_server_inflight_budget_bytes",
                       "The server's bound on sophon_server_inflight_bytes.", MetricType::Gauge,
                       stats.inflight_budget_bytes()));
  out.push_back(Single("sophon_server_inflight_peak_bytes",
                       "The most bytes ever reserved at once, all streams.", MetricType::Gauge,
                       stats.peak_inflight_bytes()));
  out.push_back(Single("sophon_server_budget_waiters",
                       "Streams waiting for bytes of the budget now.", MetricType::Gauge,
                       stats.budget_waiters()));
  out.push_back(Single("sophon_server_pending_request_bytes",
                       "Memory of request messages read and not yet admitted.", MetricType::Gauge,
                       stats.pending_request_bytes()));
  out.push_back(Single("sophon_server_stream_inflight_peak_samples",
                       "The most samples any one stream has held in flight at once.",
                       MetricType::Gauge, stats.peak_stream_inflight()));
  out.push_back(Single("sophon_server_stream_inflight_limit_samples",
                       "The server's bound on samples in flight per stream.", MetricType::Gauge,
                       stats.max_inflight_per_stream()));
  out.push_back(Single("sophon_server_cache_hits_total",
                       "Sample reads answered from the cache of raw bytes.", MetricType::Counter,
                       stats.cache_hits()));
  out.push_back(Single("sophon_server_cache_misses_total",
                       "Sample reads that went to the files (the cache of raw bytes missed).",
                       MetricType::Counter, stats.cache_misses()));
  out.push_back(Single("sophon_server_cache_evictions_total",
                       "Samples taken out of the cache of raw bytes to make room.",
                       MetricType::Counter, stats.cache_evictions()));
  out.push_back(Single("sophon_server_cache_bytes",
                       "Memory the cache of raw bytes holds, per-entry overhead included.",
                       MetricType::Gauge, stats.cache_bytes()));
  out.push_back(Single("sophon_server_cache_entries", "Samples the cache of raw bytes holds.",
                       MetricType::Gauge, stats.cache_entries()));
  out.push_back(Single("sophon_server_cache_capacity_bytes",
                       "The bound on sophon_server_cache_bytes; 0 = no cache.",
                       MetricType::Gauge, stats.cache_capacity_bytes()));
  out.push_back(Single("sophon_server_uptime_seconds", "Seconds since the server started.",
                       MetricType::Gauge, stats.uptime_seconds()));
  MetricFamily dataset = Family("sophon_server_dataset_info",
                                "The dataset served: its manifest fingerprint (hex) as a label.",
                                MetricType::Gauge);
  Add(&dataset, 1, {{"fingerprint", absl::StrFormat("%016x", stats.dataset_fingerprint())}});
  out.push_back(std::move(dataset));
  out.push_back(Single("process_cpu_seconds_total",
                       "CPU seconds of the server process, all threads, user and system.",
                       MetricType::Counter, stats.process_cpu_seconds()));
  return out;
}

std::vector<MetricFamily> ProcessMetrics() {
  std::vector<MetricFamily> out;
  absl::StatusOr<ProcessStatus> status = ReadProcessStatus();
  if (status.ok()) {
    out.push_back(Single("process_resident_memory_bytes", "Resident memory in bytes (VmRSS).",
                         MetricType::Gauge, static_cast<double>(status->rss_bytes)));
    out.push_back(Single("process_threads", "Threads of the server process.",
                         MetricType::Gauge, status->threads));
  }
  if (const int fds = OpenFileDescriptors(); fds >= 0) {
    out.push_back(Single("process_open_fds", "Open file descriptors (files and sockets).",
                         MetricType::Gauge, fds));
  }
  return out;
}

namespace {

// The text exposition of one scrape: the server's series from a fresh
// snapshot (left out, with a warning, when there is none), then the process's.
std::string Scrape(const StatsSnapshotFn& snapshot) {
  std::vector<MetricFamily> families;
  absl::StatusOr<v1::ServerStats> stats = snapshot();
  if (stats.ok()) {
    families = ServerStatsToMetrics(*stats);
  } else {
    spdlog::warn("metrics: no stats snapshot: {}", stats.status().ToString());
  }
  for (MetricFamily& family : ProcessMetrics()) families.push_back(std::move(family));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const MetricsOptions& options, StatsSnapshotFn snapshot) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) {
    return absl::InvalidArgumentError("MetricsOptions.port is -1: metrics are off");
  }
  if (!snapshot) return absl::InvalidArgumentError("MetricsExporter needs a stats snapshot");
  HttpEndpointOptions http;
  http.host = options.host;
  http.port = options.port;
  http.path = "/metrics";
  // A connection that sends nothing is closed after 2 s; it delays no scrape
  // (one thread polls every connection) and never the gRPC service.
  http.connection_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = HttpEndpoint::Start(
      http, [snapshot = std::move(snapshot)] { return Scrape(snapshot); });
  if (!endpoint.ok()) {
    return absl::Status(endpoint.status().code(),
                        absl::StrCat("metrics: ", endpoint.status().message()));
  }
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->host_ = options.host;
  exporter->endpoint_ = *std::move(endpoint);
  if (!IsLoopback(options.host)) {
    spdlog::warn("metrics on {}: plain HTTP without authentication, readable by anyone who "
                 "can reach this address",
                 exporter->address());
  }
  return exporter;
}

MetricsExporter::~MetricsExporter() = default;

int MetricsExporter::port() const { return endpoint_->port(); }

std::string MetricsExporter::address() const { return absl::StrCat(host_, ":", port()); }

}  // namespace sophon
