// The set-up of the cluster tests: a storage server on 127.0.0.1, port 0,
// over a dataset, and a client connected to it.
#ifndef SOPHON_TESTS_CLUSTER_LOCAL_SERVER_H_
#define SOPHON_TESTS_CLUSTER_LOCAL_SERVER_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/loader/sample_client.h"
#include "server/storage_server.h"

namespace sophon::testing {

struct LocalServer {
  std::unique_ptr<StorageServer> server;
  std::unique_ptr<SampleClient> client;
};

// Starts a plaintext server (no stats log) with `service` on `data_dir` and
// connects a client with `connect_timeout`.
inline absl::StatusOr<LocalServer> StartLocalServer(
    const std::string& data_dir, ServiceOptions service = ServiceOptions(),
    absl::Duration connect_timeout = absl::Seconds(10)) {
  StorageServerOptions options;
  options.data_dir = data_dir;
  options.host = "127.0.0.1";
  options.port = 0;
  options.service = std::move(service);
  options.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  if (!server.ok()) return server.status();
  ClientOptions copts;
  copts.address = (*server)->address();
  copts.connect_timeout = connect_timeout;
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  if (!client.ok()) return client.status();
  return LocalServer{*std::move(server), *std::move(client)};
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLUSTER_LOCAL_SERVER_H_
