#include "client/loader/sample_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/loader/manifest_reader.h"
#include "sophon/base/status_macros.h"
#include "sophon/net/draining.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/health_check.h"
#include "sophon/net/refusal.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// What to check when the server could not be reached: gRPC reports a TLS
// mismatch (plaintext against TLS, a refused certificate) as UNAVAILABLE
// like a server that is down, with a message that rarely says which.
absl::Status WithConnectHint(const absl::Status& status, const ClientOptions& options) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const CredentialsOptions& c = options.credentials;
  std::string causes;
  if (c.kind == "insecure") {
    // Names no option: most often the server is simply not running.
    causes = "; a TLS server refuses plaintext clients (to use TLS, give this client the CA "
             "certificate that signed the server's)";
  } else if (c.kind == "tls") {
    causes = absl::StrCat(
        "; the TLS handshake fails when the server is plaintext, when its certificate is not "
        "signed by ",
        c.tls_ca.empty() ? std::string("a CA in the system's roots") : c.tls_ca,
        " or does not name ",
        c.tls_server_name.empty() ? std::string("the host of the address") : c.tls_server_name,
        c.tls_cert.empty()
            ? ", or when the server requires a client certificate (mutual TLS) and this client "
              "has none"
            : absl::StrCat(", or when the server requires client certificates signed by a CA "
                           "that did not sign ",
                           c.tls_cert));
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), ". Check that a storage server runs at ", options.address,
                   " and that both sides use the same transport: this client uses ",
                   DescribeCredentials(c, CredentialsSide::kChannel), causes));
}

// The channel arguments of every connection to a storage server.
grpc::ChannelArguments ServerChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(64 << 20);
  // gRPC's own reconnect backoff grows to 120 s by default: a restarted
  // storage server would sit unused that long. Ours tops out at 2 s.
  // (The minimum, which is also the connect timeout, keeps its default.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return args;
}

// Whether the channel could not reach the server (as opposed to a server
// that answered with an error). A call this client never cancels that ends
// CANCELLED was cancelled by a server stopping (gRPC cancels the calls left
// when its shutdown's grace runs out): a server going away too.
bool Unreachable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kCancelled;
}

}  // namespace

FetchCall::FetchCall(v1::SampleService::Stub* stub) : stream_(stub->Fetch(&context_)) {}

FetchCall::~FetchCall() = default;

bool FetchCall::Write(const v1::FetchRequest& request) {
  const int64_t bytes = static_cast<int64_t>(request.ByteSizeLong());
  if (bytes > largest_request_bytes_.load(std::memory_order_relaxed)) {
    largest_request_bytes_.store(bytes, std::memory_order_relaxed);  // one writer
  }
  return stream_->Write(request);
}
bool FetchCall::WritesDone() { return stream_->WritesDone(); }
bool FetchCall::Read(v1::FetchResponse* response) { return stream_->Read(response); }
absl::Status FetchCall::Finish() {
  return WithMessageTooLargeHint(
      FromGrpcStatus(stream_->Finish()),
      "a request message was larger than the storage server accepts (its "
      "sophon-server --max-request-bytes, and 4 KiB); raise that limit there, or send fewer "
      "sample requests per message (LoaderOptions.requests_per_message)");
}

BackoffOptions SampleClient::RetryBackoff() {
  BackoffOptions backoff;
  backoff.initial = absl::Milliseconds(100);
  backoff.max = absl::Seconds(2);  // as the channel's own reconnect backoff
  backoff.multiplier = 2;
  backoff.jitter = 0.5;
  return backoff;
}

void SampleClient::LogRetry(absl::string_view what, const absl::Status& reason,
                            absl::Duration wait) {
  uint64_t suppressed = 0;
  if (!retry_log_.Allow(absl::Now(), &suppressed)) return;
  spdlog::warn("{} failed ({}: {}); trying again in {}{}", std::string(what),
               absl::StatusCodeToString(reason.code()), std::string(reason.message()),
               absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
               suppressed > 0 ? absl::StrCat(" [", suppressed, " earlier retries not logged]")
                              : std::string());
}

RetryOptions SampleClient::LoggedRetryOptions(absl::string_view what) {
  RetryOptions retry;
  retry.backoff = RetryBackoff();
  retry.on_retry = [this, what = std::string(what)](int, absl::Duration wait,
                                                    const absl::Status& status) {
    LogRetry(what, status, wait);
  };
  return retry;
}
void FetchCall::Cancel() { context_.TryCancel(); }

bool FetchCall::ServerDraining() const {
  const auto& trailers = context_.GetServerTrailingMetadata();
  auto it = trailers.find(kDrainingMetadataKey);
  return it != trailers.end() && it->second == "1";
}

std::string FetchCall::RefusalReason() const {
  const auto& trailers = context_.GetServerTrailingMetadata();
  auto it = trailers.find(kRefusalMetadataKey);
  if (it == trailers.end()) return std::string();
  return std::string(it->second.data(), it->second.size());
}

// The manifest's calls over the client's stub: each with the unary deadline,
// retried (with backoff, logged) while the server is unreachable, for up to
// connect_timeout.
class SampleClient::Rpcs final : public ManifestRpcs {
 public:
  explicit Rpcs(SampleClient* client) : client_(client) {}

  absl::Status GetManifest(v1::Manifest* header) override {
    return Call("GetManifest", "connect to", "connecting to", [&](grpc::ClientContext* context) {
      header->Clear();
      return client_->stub_->GetManifest(context, {}, header);
    });
  }
  absl::Status GetManifestPage(const v1::GetManifestPageRequest& request,
                               v1::ManifestPage* page) override {
    return Call(absl::StrCat("GetManifestPage (from sample ", request.start(), ")"),
                "read the manifest of", "reading the manifest of",
                [&](grpc::ClientContext* context) {
                  page->Clear();
                  return client_->stub_->GetManifestPage(context, request, page);
                });
  }

 private:
  // `doing` and `while_doing` name what is retried, before the address.
  template <typename F>
  absl::Status Call(absl::string_view method, absl::string_view doing,
                    absl::string_view while_doing, F call) {
    const ClientOptions& o = client_->options_;
    const std::string what = absl::StrCat(method, " from storage server ", o.address);
    return Retry(
        [&] {
          grpc::ClientContext context;
          SetDeadline(&context, std::min(o.rpc_timeout, o.connect_timeout));
          return WrapError(what, call(&context));
        },
        absl::StrCat(doing, " storage server ", o.address), absl::Now() + o.connect_timeout,
        client_->LoggedRetryOptions(absl::StrCat(while_doing, " storage server ", o.address)));
  }

  SampleClient* const client_;
};

absl::StatusOr<std::unique_ptr<SampleClient>> SampleClient::Connect(const ClientOptions& options) {
  if (options.address.empty() || options.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.address must be HOST:PORT, got '", options.address, "'"));
  }
  std::unique_ptr<SampleClient> client(new SampleClient());
  client->options_ = options;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(options.address, options.credentials, ServerChannelArguments());
  if (!channel.ok()) return channel.status();
  client->channel_ = *std::move(channel);
  client->stub_ = v1::SampleService::NewStub(client->channel_);
  Rpcs rpcs(client.get());
  absl::StatusOr<ServerManifest> manifest = ReadManifest(rpcs, options.address);
  if (!manifest.ok()) return WithConnectHint(manifest.status(), options);
  client->manifest_ = *std::move(manifest);
  return client;
}

absl::StatusOr<v1::ServerStats> SampleClient::GetStats() {
  const std::string what = absl::StrCat("GetStats from storage server ", options_.address);
  {
    absl::MutexLock lock(&down_mu_);
    if (down_) {
      return absl::UnavailableError(absl::StrCat(
          what, ": not asked, the server has been down since ",
          absl::FormatTime("%H:%M:%S", down_since_, absl::LocalTimeZone()), " (",
          down_why_.message(), ")"));
    }
  }
  v1::ServerStats stats;
  grpc::ClientContext context;
  SetDeadline(&context, options_.rpc_timeout);
  absl::Status status = WrapError(what, stub_->GetStats(&context, {}, &stats));
  if (status.ok()) return stats;
  if (!Unreachable(status)) return status;
  // The channel may still be backing off after an earlier failure while the
  // server is back: a connection of its own tells.
  absl::StatusOr<v1::ServerStats> fresh =
      StatsOnFreshConnection(absl::Now() + std::min(options_.rpc_timeout, kProbeTimeout));
  if (fresh.ok()) return fresh;
  MarkDown(fresh.status());
  return fresh.status();
}

absl::StatusOr<v1::ServerStats> SampleClient::StatsOnFreshConnection(absl::Time deadline) {
  const std::string what = absl::StrCat("GetStats from storage server ", options_.address,
                                        " (on a new connection)");
  // A local subchannel pool: gRPC would otherwise share the client channel's
  // connection, and its backoff.
  grpc::ChannelArguments args = ServerChannelArguments();
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(options_.address, options_.credentials, args);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<v1::SampleService::Stub> stub = v1::SampleService::NewStub(*channel);
  v1::ServerStats stats;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  RETURN_IF_ERROR(WrapError(what, stub->GetStats(&context, {}, &stats)));
  grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
  return stats;
}

absl::Status SampleClient::Probe() {
  const absl::Time deadline = absl::Now() + std::min(options_.rpc_timeout, kProbeTimeout);
  absl::StatusOr<v1::ServerStats> stats = StatsOnFreshConnection(deadline);
  if (stats.ok() && !channel_->WaitForConnected(absl::ToChronoTime(deadline))) {
    stats = absl::UnavailableError(absl::StrCat(
        "storage server ", options_.address,
        " answered on a new connection, but the client's channel did not reconnect within ",
        absl::FormatDuration(std::min(options_.rpc_timeout, kProbeTimeout))));
  }
  if (stats.ok()) {
    // A server that drains still answers calls but takes no new streams: it
    // is back only once its health service says SERVING again.
    absl::Status serving =
        CheckServing(std::max(absl::Milliseconds(1), deadline - absl::Now()));
    if (!serving.ok()) stats = std::move(serving);
  }
  if (!stats.ok()) {
    MarkDown(stats.status());
    return stats.status();
  }
  RETURN_IF_ERROR(CheckSameDataset(*stats));
  MarkUp();
  return absl::OkStatus();
}

absl::Status SampleClient::CheckServing(absl::Duration timeout) {
  absl::StatusOr<ServingStatus> health =
      CheckHealth(channel_, v1::SampleService::service_full_name(), timeout);
  if (!health.ok() || *health == ServingStatus::kServing) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("storage server ", options_.address,
                                             " answers but is ", ServingStatusName(*health),
                                             " on its health service (draining)"));
}

absl::Status SampleClient::Ping() {
  v1::ServerStats stats;
  grpc::ClientContext context;
  SetDeadline(&context, std::min(options_.rpc_timeout, kProbeTimeout));
  RETURN_IF_ERROR(WrapError(absl::StrCat("GetStats from storage server ", options_.address),
                            stub_->GetStats(&context, {}, &stats)));
  return CheckSameDataset(stats);
}

void SampleClient::MarkDown(const absl::Status& why) {
  absl::MutexLock lock(&down_mu_);
  if (down_) return;  // keeps the first reason and time
  down_ = true;
  down_why_ = why;
  down_since_ = absl::Now();
}

void SampleClient::MarkUp() {
  absl::MutexLock lock(&down_mu_);
  down_ = false;
  down_why_ = absl::OkStatus();
}

bool SampleClient::IsDown() const {
  absl::MutexLock lock(&down_mu_);
  return down_;
}

absl::StatusOr<std::vector<std::string>> SampleClient::RelativePaths(
    const std::vector<uint64_t>& ids) {
  v1::GetRelativePathsRequest request;
  request.set_fingerprint(manifest_.fingerprint);
  for (uint64_t id : ids) request.add_ids(id);
  v1::RelativePaths response;
  grpc::ClientContext context;
  SetDeadline(&context, std::min(options_.rpc_timeout, absl::Seconds(5)));
  RETURN_IF_ERROR(WrapError(absl::StrCat("GetRelativePaths from storage server ", options_.address),
                            stub_->GetRelativePaths(&context, request, &response)));
  if (response.fingerprint() != manifest_.fingerprint ||
      static_cast<size_t>(response.relative_paths_size()) != ids.size()) {
    return absl::DataLossError(absl::StrCat("storage server ", options_.address, " sent ",
                                            response.relative_paths_size(), " paths for ",
                                            ids.size(), " ids, or of another dataset"));
  }
  return std::vector<std::string>(response.relative_paths().begin(),
                                  response.relative_paths().end());
}

absl::Status SampleClient::CheckSameDataset(const v1::ServerStats& stats) const {
  if (stats.dataset_fingerprint() == manifest_.fingerprint) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "storage server %s now serves another dataset (fingerprint %016x, was %016x when this "
      "client read its manifest of %d samples); restart the training job",
      options_.address, stats.dataset_fingerprint(), manifest_.fingerprint,
      manifest_.num_samples()));
}

absl::Status SampleClient::AwaitSameServer(const std::function<bool()>& stop) {
  // Short probes (2 s each) so that `stop` is seen promptly; GetStats carries
  // the dataset's fingerprint, so the (possibly large) manifest is not re-read.
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  v1::ServerStats stats;
  const std::string what = absl::StrCat("GetStats from storage server ", options_.address);
  RetryOptions retry = LoggedRetryOptions(
      absl::StrCat("waiting for storage server ", options_.address, " to come back"));
  retry.stop = stop;
  absl::Status status = Retry(
      [&] {
        grpc::ClientContext context;
        SetDeadline(&context, std::max(absl::Milliseconds(50),
                                       std::min({options_.rpc_timeout, absl::Seconds(2),
                                                 deadline - absl::Now()})));
        // Waits (up to the deadline) for the channel's own reconnection
        // instead of failing at once while it is between attempts.
        context.set_wait_for_ready(true);
        stats.Clear();
        return WrapError(what, stub_->GetStats(&context, {}, &stats));
      },
      absl::StrCat("wait for storage server ", options_.address, " to come back"), deadline,
      retry);
  if (!status.ok()) {
    // A wait-for-ready probe that timed out means the server is still away.
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::UnavailableError(status.message());
    }
    return status;
  }
  RETURN_IF_ERROR(CheckSameDataset(stats));
  MarkUp();
  return absl::OkStatus();
}

std::unique_ptr<FetchCall> SampleClient::OpenFetch() {
  return std::make_unique<FetchCall>(stub_.get());
}

}  // namespace sophon
