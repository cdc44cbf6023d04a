#include "client/offload/net_probe.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/loader/sampler.h"
#include "sophon/base/cpu_time.h"
#include "sophon/net/wire.h"

namespace sophon {

double ProbeSendCpuSeconds(double process_cpu, double sample_cpu, double all_bytes,
                           double probe_bytes) {
  const double send = std::max(0.0, process_cpu - sample_cpu);
  if (!(probe_bytes > 0)) return send;
  return send * probe_bytes / std::max(all_bytes, probe_bytes);
}

absl::StatusOr<NetProbeResult> ProbeBandwidth(SampleClient* client,
                                              const NetProbeOptions& options) {
  const ServerManifest& manifest = client->manifest();
  std::vector<uint64_t> order = EpochOrder(options.seed, /*epoch=*/~0ULL, manifest.num_samples());
  if (static_cast<int64_t>(order.size()) > options.max_samples) order.resize(options.max_samples);
  absl::StatusOr<v1::ServerStats> stats0 = client->GetStats();
  const double cpu0 = ProcessCpuSeconds();
  std::unique_ptr<FetchCall> call = client->OpenFetch();
  std::thread writer([&] {
    FetchRequestBuilder builder(/*epoch=*/0, /*seed=*/0, PipelineOptions());
    for (size_t i = 0; i < order.size(); ++i) {
      builder.Add(order[i], kFirstStage);
      if (builder.size() == 32 || i + 1 == order.size()) {
        if (!call->Write(builder.Take())) return;
      }
    }
    call->WritesDone();
  });
  NetProbeResult result;
  v1::FetchResponse response;
  // The clock starts at the first byte, so connection set-up is not counted.
  absl::Time first = absl::InfiniteFuture(), last = absl::InfiniteFuture();
  uint64_t first_bytes = 0;
  double server_sample_cpu = 0;
  const absl::Time deadline = absl::Now() + options.max_time;
  bool cut_short = false;
  while (call->Read(&response)) {
    const absl::Time now = absl::Now();
    uint64_t bytes = 0;
    for (const v1::Sample& s : response.samples()) {
      bytes += s.payload().size();
      result.server_read_seconds += s.server_read_seconds();
      server_sample_cpu += s.server_cpu_seconds();
    }
    if (first == absl::InfiniteFuture()) {
      first = now;
      first_bytes = bytes;
    }
    last = now;
    result.bytes += bytes;
    result.samples += response.samples_size();
    if (now > deadline) {
      cut_short = true;
      call->Cancel();
      break;
    }
  }
  writer.join();
  if (cut_short) {
    while (call->Read(&response)) {
    }
  }
  absl::Status status = call->Finish();
  result.client_cpu_seconds = ProcessCpuSeconds() - cpu0;
  absl::StatusOr<v1::ServerStats> stats1 = client->GetStats();
  if (stats0.ok() && stats1.ok() && stats1->process_cpu_seconds() > 0) {
    // Every client's samples and bytes over the probe (a server before the
    // sample sums reports 0: then this probe's own, as if alone).
    const double all_samples = stats1->sample_cpu_seconds() - stats0->sample_cpu_seconds();
    double all_bytes = 0;
    for (int i = 0; i < stats1->bytes_by_stage_size(); ++i) {
      all_bytes += static_cast<double>(stats1->bytes_by_stage(i)) -
                   (i < stats0->bytes_by_stage_size() ? stats0->bytes_by_stage(i) : 0.0);
    }
    result.server_send_cpu_seconds = ProbeSendCpuSeconds(
        stats1->process_cpu_seconds() - stats0->process_cpu_seconds(),
        all_samples > 0 ? all_samples : server_sample_cpu, all_bytes,
        static_cast<double>(result.bytes));
  }
  if (!cut_short && !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("bandwidth probe of storage server ",
                                                    client->address(), " failed: ",
                                                    status.message()));
  }
  result.seconds = first < last ? absl::ToDoubleSeconds(last - first) : 0;
  if (result.seconds <= 0 || result.bytes <= first_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bandwidth probe of ", client->address(), " moved too little data to measure (",
        result.bytes, " bytes); give the bandwidth instead (SmartoffOptions.net_bw_mbit)"));
  }
  result.bytes_per_second = (result.bytes - first_bytes) / result.seconds;
  return result;
}

}  // namespace sophon
