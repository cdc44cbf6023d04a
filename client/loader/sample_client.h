// The training node's connection to one storage server: one channel and stub
// for the client's lifetime, deadlines on every unary call, retries with
// backoff only for codes that mean "try again" (sophon/net/grpc_util.h).
#ifndef SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_
#define SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/loader/server_manifest.h"
#include "sophon/base/rate_limiter.h"
#include "sophon/net/credentials.h"
#include "sophon/net/grpc_util.h"
#include "sophon/v1/sophon.grpc.pb.h"

namespace sophon {

struct ClientOptions {
  std::string address;                          // HOST:PORT of sophon-server
  CredentialsOptions credentials;               // transport security; default insecure
  // Retry budget, with backoff and jitter, while the server is unreachable:
  // at start (Connect), after a Fetch stream broke (AwaitSameServer), and
  // while it refuses Fetch streams because it is full (its max_streams or
  // max_streams_per_peer; the loader retries those).
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration rpc_timeout = absl::Seconds(30);      // deadline of each unary call
};

// One Fetch stream. Write/Read may be called from two different threads
// (one writer, one reader), as gRPC allows.
class FetchCall {
 public:
  explicit FetchCall(v1::SampleService::Stub* stub);
  ~FetchCall();
  bool Write(const v1::FetchRequest& request);
  bool WritesDone();
  bool Read(v1::FetchResponse* response);
  // After Read returned false: the stream's final status. gRPC's "message
  // larger than max" (a request over what the server accepts) gets a hint
  // naming the server's --max-request-bytes.
  absl::Status Finish();
  // Ends the call early from any thread.
  void Cancel();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream_;
};

class SampleClient {
 public:
  // Connects and reads the manifest (ReadManifest: the header, then its
  // pages), retrying each call while the server is unreachable or
  // restarting; after connect_timeout: UNAVAILABLE naming the address.
  // FAILED_PRECONDITION if the server's dataset changed while its manifest
  // was read. InvalidArgument for a malformed address or an unknown
  // credentials kind.
  static absl::StatusOr<std::unique_ptr<SampleClient>> Connect(const ClientOptions& options);

  const ServerManifest& manifest() const { return manifest_; }
  const std::string& address() const { return options_.address; }
  absl::Duration connect_timeout() const { return options_.connect_timeout; }

  absl::StatusOr<v1::ServerStats> GetStats();
  // For messages: the relative paths of samples `ids` (at most 16) of this
  // server's manifest, in one call without retries, with a deadline of at
  // most 5 s. Errors name the address; FAILED_PRECONDITION if the server now
  // serves another dataset.
  absl::StatusOr<std::vector<std::string>> RelativePaths(const std::vector<uint64_t>& ids);
  std::unique_ptr<FetchCall> OpenFetch();
  // FAILED_PRECONDITION naming the address if `stats` (from GetStats) shows
  // the server now serves another dataset than the manifest this client read
  // (a restart with other data: its labels and sizes would not match).
  absl::Status CheckSameDataset(const v1::ServerStats& stats) const;
  // After a Fetch stream broke: waits (with backoff, up to connect_timeout)
  // until the server answers again and checks that it serves the same dataset
  // (CheckSameDataset). Errors name the address: UNAVAILABLE if it did not
  // come back, FAILED_PRECONDITION if its dataset changed, CANCELLED once
  // `stop` returns true.
  absl::Status AwaitSameServer(const std::function<bool()>& stop);
  // Logs (warn, at most one line per 5 s, counting the others) that
  // `what` failed with `reason` and is tried again in `wait`. Thread-safe.
  void LogRetry(absl::string_view what, const absl::Status& reason, absl::Duration wait);
  // The backoff of this client's retries (exponential, with jitter).
  static BackoffOptions RetryBackoff();

 private:
  SampleClient() = default;
  RetryOptions LoggedRetryOptions(absl::string_view what);
  class Rpcs;  // ManifestRpcs over stub_

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SampleService::Stub> stub_;
  ServerManifest manifest_;
  RateLimiter retry_log_{1, absl::Seconds(5)};
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_
