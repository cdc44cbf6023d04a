#include "server/storage_server.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/grpc_service.h"
#include "server/health_service.h"
#include "server/memory_bound.h"
#include "sophon/base/allocator.h"
#include "sophon/data/cached_source.h"
#include "sophon/data/open_source.h"
#include "sophon/net/wire.h"
#include "sophon/v1/sophon.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace sophon {

absl::Status StorageServerOptions::Validate() const {
  if (data_dir.empty()) {
    return absl::InvalidArgumentError("StorageServerOptions.data_dir is required");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("StorageServerOptions.port must be in [0, 65535], got ", port));
  }
  if (drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StorageServerOptions.drain_timeout must be >= 0, got ",
        absl::FormatDuration(drain_timeout)));
  }
  if (absl::Status s = metrics.Validate(); !s.ok()) return s;
  if (absl::Status s = source.Validate(); !s.ok()) return s;
  if (absl::Status s = pack.Validate(); !s.ok()) return s;
  if (absl::Status s = service.limits.Validate(); !s.ok()) return s;
  return service.Validate();
}

absl::StatusOr<std::unique_ptr<StorageServer>> StorageServer::Start(
    const StorageServerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<StorageServer> server(new StorageServer());
  server->options_ = options;
  const absl::Time listing = absl::Now();
  absl::StatusOr<std::unique_ptr<SampleSource>> source =
      OpenSampleSource(options.data_dir, options.source, options.pack);
  if (!source.ok()) return source.status();
  server->source_ = *std::move(source);
  // The cache of raw sample bytes: in front of the source, so that the
  // service and the metrics see it like any source.
  if (options.service.cache.enabled()) {
    server->source_ =
        std::make_unique<CachedSource>(std::move(server->source_), options.service.cache);
    spdlog::info("sample cache: {} bytes, policy {} ({} B per entry besides its bytes)",
                 options.service.cache.bytes,
                 std::string(CachePolicyName(options.service.cache.policy)),
                 kCacheEntryOverheadBytes);
  }
  const absl::Time encoding = absl::Now();
  server->impl_ = std::make_unique<SampleServiceImpl>(server->source_.get(), options.service);
  // Building the manifest grew its arrays by doubling: the blocks left
  // behind stay in malloc's heap (ConfigureAllocatorForLargeBuffers keeps
  // freed memory) until given back, which costs nothing while nothing runs.
  ReleaseFreeMemory();
  const ManifestPages& pages = server->impl_->manifest_pages();
  spdlog::info("manifest: {} samples listed in {:.1f} s, {} pages of at most {} bytes encoded in "
               "{:.1f} s; held: {:.1f} MiB of samples and paths, {:.1f} MiB of pages",
               server->source_->size(), absl::ToDoubleSeconds(encoding - listing),
               pages.num_pages(), options.service.manifest_page_bytes,
               absl::ToDoubleSeconds(absl::Now() - encoding),
               server->source_->manifest().memory_bytes() / 1048576.0,
               pages.memory_bytes() / 1048576.0);
  server->grpc_service_ = std::make_unique<GrpcSampleService>(server->impl_.get());

  const std::string address = absl::StrCat(
      options.host.find(':') != std::string::npos ? absl::StrCat("[", options.host, "]")
                                                   : options.host,
      ":", options.port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      CreateServerCredentials(options.credentials);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, *credentials, &server->port_);
  builder.RegisterService(server->grpc_service_.get());
  // The standard health service (grpc.health.v1.Health: Check and Watch),
  // for load balancers and orchestrators: SERVING until Drain(). Ours, not
  // gRPC's default, so that its requests are bounded like the service's
  // (server/health_service.h); the gRPC server owns it.
  auto health = std::make_unique<HealthService>(server->impl_.get());
  builder.RegisterService(health->methods());
  builder.SetOption(
      std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(std::move(health)));
  builder.SetMaxSendMessageSize(-1);
  // Fetch's request limit and a little: the service refuses what lies
  // between with a message that names its limit (the unary methods' limits,
  // server/request_limits.h, are far below); gRPC refuses the rest, once a
  // message is whole (server/unary_reactor.h says what holds it before).
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(INT32_MAX, options.service.max_request_bytes + 4096)));
  // gRPC's own memory (messages being received and sent, per-call state of
  // streams and unary calls alike) comes out of one quota: under pressure
  // gRPC shrinks its flow-control windows, then ends calls, instead of
  // growing without bound.
  if (options.service.transport_memory_bytes > 0) {
    grpc::ResourceQuota quota("sophon-server");
    quota.Resize(static_cast<size_t>(options.service.transport_memory_bytes));
    builder.SetResourceQuota(quota);
  }
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             options.service.max_calls_per_connection);
  // What a connection can make the server buffer before the service reads:
  // a stream not being read holds at most its initial window, which BDP
  // probing would grow (requests are small; the answers' direction is the
  // client's windows, unaffected).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                             static_cast<int>(options.service.stream_window_bytes));
  // gRPC sets TCP_USER_TIMEOUT on accepted sockets to the keepalive timeout:
  // a connection whose client takes no bytes for that long is dropped, with
  // every call on it, so a client that never reads its socket cannot hold
  // answers (or the budget's bytes) longer than that.
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.service.unread_connection_timeout)));
  // Refuse a port another process listens on (gRPC sets SO_REUSEPORT by
  // default: two servers would split the connections between them).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address,
        ": the port is in use by another process or the address is not one of this machine's "
        "(StorageServerOptions.host, StorageServerOptions.port)"));
  }
  if (grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus(v1::SampleService::service_full_name(), true);
  }
  if (options.metrics.enabled()) {
    absl::StatusOr<std::unique_ptr<MetricsExporter>> metrics = MetricsExporter::Start(
        options.metrics, [impl = server->impl_.get()]() -> absl::StatusOr<v1::ServerStats> {
          v1::ServerStats stats;
          if (absl::Status s = impl->GetStats({}, &stats); !s.ok()) return s;
          return stats;
        });
    if (!metrics.ok()) return metrics.status();  // the destructor stops the gRPC server
    server->metrics_ = *std::move(metrics);
    spdlog::info("metrics on http://{}/metrics", server->metrics_->address());
  }
  spdlog::info("transport: {}",
               DescribeCredentials(options.credentials, CredentialsSide::kServer));
  spdlog::info("serving {} samples in {} classes from {} on {}:{} with {} prep workers",
               server->source_->size(), server->source_->class_names().size(),
               options.data_dir, options.host, server->port_, options.service.prep_workers);
  const ServerMemoryBound bound = ComputeServerMemoryBound(
      options.service,
      static_cast<int64_t>(server->source_->manifest().memory_bytes() +
                           server->impl_->manifest_pages().memory_bytes()),
      options.source.max_file_bytes, static_cast<int64_t>(server->source_->buffer_bytes()));
  spdlog::info("memory bound: {}", bound.ToString());
  if (options.stats_interval > absl::ZeroDuration()) {
    server->stats_thread_ = std::thread([s = server.get()] { s->StatsLoop(); });
  }
  return server;
}

std::string StorageServer::address() const { return absl::StrCat(options_.host, ":", port_); }

void StorageServer::Wait() { shutdown_.WaitForNotification(); }

absl::Duration StorageServer::Drain() {
  if (server_ == nullptr) return absl::ZeroDuration();
  StreamRegistry& registry = impl_->registry();
  const absl::Time start = absl::Now();
  v1::ServerStats stats;
  const int open = registry.open_streams();
  const uint64_t inflight =
      impl_->GetStats({}, &stats).ok() ? stats.inflight_samples() : uint64_t{0};
  // New streams are refused before health says NOT_SERVING: a client that
  // sees NOT_SERVING and opens a stream anyway is refused, never admitted
  // as a stream the drain would then wait for.
  registry.DrainAll(absl::UnavailableError(
      absl::StrCat("the server ", address(), " is draining before it stops")));
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);  // every service, and the server as a whole
  }
  spdlog::info("draining: new streams refused, health NOT_SERVING; {} streams open with {} "
               "samples started, waiting up to {} (--drain-timeout) for them to be sent",
               open, inflight, absl::FormatDuration(options_.drain_timeout));
  const absl::Time deadline = start + options_.drain_timeout;
  while (registry.open_streams() > 0 && absl::Now() < deadline &&
         !drain_cut_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
  }
  const int left = registry.open_streams();
  if (left > 0) {
    const std::string why =
        drain_cut_.HasBeenNotified()
            ? "cut short by a second signal"
            : absl::StrCat("drain_timeout ", absl::FormatDuration(options_.drain_timeout));
    registry.EvictAll(absl::UnavailableError(absl::StrCat(
        "the server ", address(), " is stopping: its drain ran out of time (", why, ")")));
    spdlog::warn("drain: {} streams still open after {:.1f} s were ended ({})", left,
                 absl::ToDoubleSeconds(absl::Now() - start), why);
  } else {
    spdlog::info("drained in {:.2f} s: every stream has ended",
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  if (drain_cut_.HasBeenNotified()) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), deadline - absl::Now());
}

void StorageServer::Shutdown(absl::Duration grace) {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  metrics_.reset();  // no scrape reads the service after this
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
    server_.reset();
  }
  if (stats_thread_.joinable()) stats_thread_.join();
}

StorageServer::~StorageServer() { Shutdown(); }

void StorageServer::StatsLoop() {
  v1::ServerStats prev;
  if (!impl_->GetStats({}, &prev).ok()) return;  // never fails today; nothing to log if it does
  int64_t prev_releases = impl_->memory_releaser().releases();
  double prev_release_s = impl_->memory_releaser().release_seconds();
  while (!shutdown_.WaitForNotificationWithTimeout(options_.stats_interval)) {
    v1::ServerStats cur;
    if (!impl_->GetStats({}, &cur).ok()) continue;
    uint64_t samples = 0, bytes = 0;
    std::string by_stage;
    for (Stage stage : AllStages()) {
      const uint64_t n = StatsSamplesAt(cur, stage) - StatsSamplesAt(prev, stage);
      samples += n;
      bytes += StatsBytesAt(cur, stage) - StatsBytesAt(prev, stage);
      absl::StrAppend(&by_stage, by_stage.empty() ? "" : " ", StageName(stage), "=", n);
    }
    uint64_t declined = 0;
    for (const auto& [name, n] : cur.declined_by_stage()) declined += n;
    for (const auto& [name, n] : prev.declined_by_stage()) declined -= n;
    if (declined > 0) absl::StrAppend(&by_stage, ", ", declined, " sent whole (not croppable)");
    const double secs = cur.uptime_seconds() - prev.uptime_seconds();
    const double busy = cur.prep_busy_seconds() - prev.prep_busy_seconds();
    if (samples > 0 || cur.active_streams() > 0) {
      std::string cache;
      if (cur.cache_capacity_bytes() > 0) {
        const uint64_t hits = cur.cache_hits() - prev.cache_hits();
        const uint64_t reads = hits + cur.cache_misses() - prev.cache_misses();
        cache = absl::StrFormat(
            ", cache hits %.0f%% of %d reads (%d evicted), %.0f MB of %.0f MB held in %d samples",
            reads > 0 ? 100.0 * hits / reads : 0.0, reads,
            cur.cache_evictions() - prev.cache_evictions(), cur.cache_bytes() / 1e6,
            cur.cache_capacity_bytes() / 1e6, cur.cache_entries());
      }
      // What giving freed memory back cost (the arenas' locks are held meanwhile).
      const int64_t releases = impl_->memory_releaser().releases();
      const double release_s = impl_->memory_releaser().release_seconds();
      if (releases > prev_releases) {
        absl::StrAppend(&cache, absl::StrFormat(", freed memory given back %d times in %.1f ms",
                                                releases - prev_releases,
                                                1e3 * (release_s - prev_release_s)));
      }
      prev_releases = releases;
      prev_release_s = release_s;
      spdlog::info(absl::StrFormat(
          "served %.0f samples/s (%s), %.1f MB/s, prep busy %.0f%% of %d workers, queue %d, "
          "in flight %d (%.0f MB of %.0f MB), streams %d, failed %d, refused %d%s",
          samples / secs, by_stage, bytes / secs / 1e6, 100.0 * busy / (secs * cur.prep_workers()),
          cur.prep_workers(), cur.queue_depth(), cur.inflight_samples(),
          cur.inflight_bytes() / 1e6, cur.inflight_budget_bytes() / 1e6, cur.active_streams(),
          cur.samples_failed() - prev.samples_failed(),
          cur.requests_rejected() - prev.requests_rejected(), cache));
    }
    prev = cur;
  }
}

}  // namespace sophon
