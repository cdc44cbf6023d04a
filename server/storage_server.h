// A running storage node: sample source + service + gRPC server + periodic stats log.
#ifndef SOPHON_SERVER_STORAGE_SERVER_H_
#define SOPHON_SERVER_STORAGE_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/metrics_exporter.h"
#include "server/service_impl.h"
#include "sophon/data/image_folder.h"
#include "sophon/data/pack_source.h"
#include "sophon/net/credentials.h"

namespace grpc {
class Server;
}

namespace sophon {

class GrpcSampleService;

struct StorageServerOptions {
  std::string data_dir;               // ImageFolder root
  ImageFolderOptions source;          // how far the dataset's files are trusted
  PackSourceOptions pack;             // a pack's group buffers (max_sample_bytes: source's)
  std::string host = "127.0.0.1";     // address to listen on; 0.0.0.0 for all interfaces
  int port = 50051;                   // 0 picks a free port
  CredentialsOptions credentials;     // transport security; default insecure
  ServiceOptions service;
  absl::Duration stats_interval = absl::Seconds(10);  // log line period under load; 0 = off
  MetricsOptions metrics;             // Prometheus /metrics endpoint; off unless metrics.port >= 0
  // How long Drain() waits for the samples already started to be sent
  // before it ends the streams that still have some; >= 0.
  absl::Duration drain_timeout = absl::Seconds(10);

  absl::Status Validate() const;
};

class StorageServer {
 public:
  // Opens the ImageFolder at options.data_dir and starts serving. Errors name
  // the directory, the address or the credentials kind.
  static absl::StatusOr<std::unique_ptr<StorageServer>> Start(const StorageServerOptions& options);
  // Stops accepting calls, lets streams end (up to `grace`), joins threads.
  ~StorageServer();

  int port() const { return port_; }
  // The /metrics port (the chosen one when options.metrics.port was 0); 0 when off.
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  std::string address() const;
  SampleServiceImpl* service() { return impl_.get(); }
  const SampleSource& source() const { return *source_; }

  // Blocks until Shutdown() is called from another thread.
  void Wait();
  // Prepares to stop without losing a sample: reports NOT_SERVING on the
  // standard health service (grpc.health.v1.Health), refuses new Fetch
  // streams, and lets every open stream send the samples it has started and
  // end with UNAVAILABLE and the sophon-draining trailer (what it had not
  // started is handed back: its client asks a replica). Returns once no
  // stream is open, or after options.drain_timeout (then the streams left
  // are ended), or when CutDrainShort() is called. Unary calls (manifest,
  // stats, health) are still answered. Returns the grace to give
  // Shutdown() after it: what is left of options.drain_timeout, zero once it
  // ran out or was cut short (so the drain and the shutdown together keep to
  // drain_timeout, whatever the clients do: a stream ended while its client
  // reads nothing is cancelled, not waited for).
  absl::Duration Drain();
  // Makes a Drain() in progress return at once (a second signal).
  void CutDrainShort() { drain_cut_.Notify(); }
  void Shutdown(absl::Duration grace = absl::Seconds(2));

 private:
  StorageServer() = default;
  void StatsLoop();

  StorageServerOptions options_;
  std::unique_ptr<SampleSource> source_;
  std::unique_ptr<SampleServiceImpl> impl_;
  std::unique_ptr<GrpcSampleService> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsExporter> metrics_;  // reads impl_: stopped before it goes
  int port_ = 0;
  absl::Notification shutdown_;
  absl::Notification drain_cut_;
  std::thread stats_thread_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_STORAGE_SERVER_H_
