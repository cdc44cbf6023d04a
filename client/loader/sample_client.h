// The training node's connection to one storage server: one channel and stub
// for the client's lifetime, deadlines on every unary call, retries with
// backoff only for codes that mean "try again" (sophon/net/grpc_util.h).
#ifndef SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_
#define SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  // at start (Connect), after a Fetch stream broke and the server does not
  // answer while no replica can serve (AwaitSameServer), and while it refuses
  // Fetch streams because it is full (its max_streams or
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
  // After Finish: the server ended or refused the stream because it is
  // draining before it stops (the sophon-draining trailer): it will not
  // serve this client's samples again until it is restarted.
  bool ServerDraining() const;
  // After Finish: the reason the server gave for ending or refusing the
  // stream (the sophon-refusal trailer, a RefusalName from
  // sophon/net/refusal.h); empty when it gave none (gRPC or the transport
  // ended the stream, or the server is older).
  std::string RefusalReason() const;
  // The encoded size of the largest request message written on the stream.
  int64_t largest_request_bytes() const {
    return largest_request_bytes_.load(std::memory_order_relaxed);
  }
  // Ends the call early from any thread.
  void Cancel();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream_;
  std::atomic<int64_t> largest_request_bytes_{0};
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

  // The server's statistics, for reports and measurements: one call with the
  // unary deadline and no retries, so a server that is gone costs no wait.
  // A server marked down (MarkDown) is not asked: UNAVAILABLE at once, naming
  // the address and why it is down. One the channel cannot reach is tried
  // once more on a connection of its own (as Probe, so that a channel still
  // backing off from an earlier failure is not mistaken for a dead server);
  // if that fails too the server is marked down. Errors name the address.
  absl::StatusOr<v1::ServerStats> GetStats();
  // One cheap check whether a server marked down (or any) is up again: a
  // GetStats on a connection of its own (a refused connection shows at once,
  // not hidden by the channel's reconnect backoff), without waiting for
  // ready, no retries, within kProbeTimeout. Once it answers, the channel is
  // made to reconnect at once and awaited (within the same time), the dataset
  // checked (FAILED_PRECONDITION if it changed) and the down mark cleared.
  // A failure marks the server down. Errors name the address.
  absl::Status Probe();
  static constexpr absl::Duration kProbeTimeout = absl::Seconds(1);
  // Whether a server that answers takes new Fetch streams: one Check of
  // sophon.v1.SampleService on its health service over the client's channel,
  // without waiting for ready, no retries, within `timeout`. UNAVAILABLE
  // naming the address when the reply is anything but SERVING (it drains
  // before it stops); OK when it is SERVING, when the server has no health
  // service, and when the check itself fails (the caller's next call finds
  // out why). Marks nothing.
  absl::Status CheckServing(absl::Duration timeout);
  // After a Fetch stream ended with an error: does the server still answer?
  // One GetStats on the client's channel, without waiting for ready, no
  // retries, a deadline of at most kProbeTimeout. A live server that reset the
  // stream answers (over the same connection, or a new one at once); one whose
  // process is gone refuses the connection: UNAVAILABLE, at once.
  // FAILED_PRECONDITION if it now serves another dataset. Errors name the
  // address.
  absl::Status Ping();
  // Marks the server down (the loader goes on without it, or it could not be
  // reached): GetStats does not ask it until Probe or AwaitSameServer finds it
  // back. Thread-safe, as IsDown.
  void MarkDown(const absl::Status& why);
  bool IsDown() const;
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
  // `stop` returns true. Back, it is no longer marked down.
  absl::Status AwaitSameServer(const std::function<bool()>& stop);
  // Logs (warn, at most one line per 5 s, counting the others) that
  // `what` failed with `reason` and is tried again in `wait`. Thread-safe.
  void LogRetry(absl::string_view what, const absl::Status& reason, absl::Duration wait);
  // The backoff of this client's retries (exponential, with jitter).
  static BackoffOptions RetryBackoff();

 private:
  SampleClient() = default;
  RetryOptions LoggedRetryOptions(absl::string_view what);
  // GetStats on a channel of its own (see Probe); `deadline` bounds it. On
  // success the client's channel is told to reconnect at once.
  absl::StatusOr<v1::ServerStats> StatsOnFreshConnection(absl::Time deadline);
  void MarkUp();
  class Rpcs;  // ManifestRpcs over stub_

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SampleService::Stub> stub_;
  ServerManifest manifest_;
  RateLimiter retry_log_{1, absl::Seconds(5)};

  mutable absl::Mutex down_mu_;
  bool down_ ABSL_GUARDED_BY(down_mu_) = false;
  absl::Status down_why_ ABSL_GUARDED_BY(down_mu_);
  absl::Time down_since_ ABSL_GUARDED_BY(down_mu_);
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SAMPLE_CLIENT_H_
