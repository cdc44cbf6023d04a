#include "client/loader/sample_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kDeadlineExceeded;
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

absl::Status RetryWithBackoff(const std::function<absl::Status()>& attempt, absl::Time deadline,
                              const std::function<bool()>& stop) {
  absl::Duration backoff = absl::Milliseconds(50);
  int tries = 0;
  while (true) {
    if (stop && stop()) return absl::CancelledError("stopped while retrying");
    absl::Status status = attempt();
    ++tries;
    if (status.ok() || !IsRetryable(status.code())) return status;
    const absl::Time now = absl::Now();
    if (now + backoff >= deadline) {
      return absl::Status(status.code(), absl::StrCat(status.message(), " (gave up after ",
                                                      tries, " tries)"));
    }
    spdlog::debug("retrying in {} after: {}", absl::FormatDuration(backoff), std::string(status.message()));
    // Sleeps in short slices so that `stop` is seen promptly.
    for (absl::Duration left = backoff; left > absl::ZeroDuration();
         left -= absl::Milliseconds(50)) {
      if (stop && stop()) return absl::CancelledError("stopped while retrying");
      absl::SleepFor(std::min(left, absl::Milliseconds(50)));
    }
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

FetchCall::FetchCall(v1::SampleService::Stub* stub) : stream_(stub->Fetch(&context_)) {}

FetchCall::~FetchCall() = default;

bool FetchCall::Write(const v1::FetchRequest& request) { return stream_->Write(request); }
bool FetchCall::WritesDone() { return stream_->WritesDone(); }
bool FetchCall::Read(v1::FetchResponse* response) { return stream_->Read(response); }
absl::Status FetchCall::Finish() { return FromGrpc(stream_->Finish()); }
void FetchCall::Cancel() { context_.TryCancel(); }

absl::StatusOr<std::unique_ptr<SampleClient>> SampleClient::Connect(const ClientOptions& options) {
  if (options.address.empty() || options.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server must be HOST:PORT, got '", options.address, "'"));
  }
  std::unique_ptr<SampleClient> client(new SampleClient());
  client->options_ = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(64 << 20);
  // gRPC's own reconnect backoff grows to 120 s by default: a restarted
  // storage server would sit unused that long. Ours tops out at 2 s.
  // (The minimum, which is also the connect timeout, keeps its default.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  client->channel_ = grpc::CreateCustomChannel(options.address,
                                               grpc::InsecureChannelCredentials(), args);
  client->stub_ = v1::SampleService::NewStub(client->channel_);
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  absl::Status status = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetDeadline(&context, std::min(options.rpc_timeout, options.connect_timeout));
        client->manifest_.Clear();
        return FromGrpc(client->stub_->GetManifest(&context, {}, &client->manifest_));
      },
      deadline);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("cannot get the manifest from storage server ",
                                                    options.address, ": ", status.message()));
  }
  const v1::Manifest& m = client->manifest_;
  if (static_cast<uint32_t>(m.labels_size()) != m.num_samples() ||
      static_cast<uint32_t>(m.raw_sizes_size()) != m.num_samples()) {
    return absl::DataLossError(
        absl::StrCat("storage server ", options.address, " sent an inconsistent manifest"));
  }
  return client;
}

absl::StatusOr<v1::ServerStats> SampleClient::GetStats() {
  v1::ServerStats stats;
  absl::Status status = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetDeadline(&context, options_.rpc_timeout);
        return FromGrpc(stub_->GetStats(&context, {}, &stats));
      },
      absl::Now() + options_.rpc_timeout);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("cannot get stats from storage server ",
                                                    options_.address, ": ", status.message()));
  }
  return stats;
}

absl::Status SampleClient::CheckSameDataset(const v1::ServerStats& stats) const {
  if (stats.dataset_fingerprint() == manifest_.fingerprint()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "storage server %s now serves another dataset (fingerprint %016x, was %016x when this "
      "client read its manifest of %d samples); restart the training job",
      options_.address, stats.dataset_fingerprint(), manifest_.fingerprint(),
      manifest_.num_samples()));
}

absl::Status SampleClient::AwaitSameServer(const std::function<bool()>& stop) {
  // Short probes (2 s each) so that `stop` is seen promptly; GetStats carries
  // the dataset's fingerprint, so the (possibly large) manifest is not re-read.
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  v1::ServerStats stats;
  absl::Status status = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetDeadline(&context, std::max(absl::Milliseconds(50),
                                       std::min({options_.rpc_timeout, absl::Seconds(2),
                                                 deadline - absl::Now()})));
        // Waits (up to the deadline) for the channel's own reconnection
        // instead of failing at once while it is between attempts.
        context.set_wait_for_ready(true);
        stats.Clear();
        return FromGrpc(stub_->GetStats(&context, {}, &stats));
      },
      deadline, stop);
  if (!status.ok()) {
    if (status.code() == absl::StatusCode::kCancelled) return status;
    // A wait-for-ready probe that timed out means the server is still away.
    const absl::StatusCode code = status.code() == absl::StatusCode::kDeadlineExceeded
                                      ? absl::StatusCode::kUnavailable
                                      : status.code();
    return absl::Status(code,
                        absl::StrCat("storage server ", options_.address, " did not come back within ",
                                     absl::FormatDuration(options_.connect_timeout), ": ",
                                     status.message()));
  }
  return CheckSameDataset(stats);
}

std::unique_ptr<FetchCall> SampleClient::OpenFetch() {
  return std::make_unique<FetchCall>(stub_.get());
}

}  // namespace sophon
