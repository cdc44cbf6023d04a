#include "net_probe.h"

#include <sys/resource.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "sampler.h"
#include "sophon/wire.h"

namespace sophon {
namespace {

double ProcessCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

}  // namespace

absl::StatusOr<NetProbeResult> ProbeBandwidth(SampleClient* client,
                                              const NetProbeOptions& options) {
  const v1::Manifest& manifest = client->manifest();
  std::vector<uint64_t> order = EpochOrder(options.seed, /*epoch=*/~0ULL, manifest.num_samples());
  if (static_cast<int64_t>(order.size()) > options.max_samples) order.resize(options.max_samples);
  const double cpu0 = ProcessCpuSeconds();
  std::unique_ptr<FetchCall> call = client->OpenFetch();
  std::thread writer([&] {
    v1::FetchRequest request;
    *request.mutable_augment() = ToProto(AugmentOptions());
    for (size_t i = 0; i < order.size(); ++i) {
      v1::SampleRequest* sr = request.add_samples();
      sr->set_id(order[i]);
      sr->set_target_stage(v1::STAGE_RAW);
      if (request.samples_size() == 32 || i + 1 == order.size()) {
        if (!call->Write(request)) return;
        request.clear_samples();
      }
    }
    call->WritesDone();
  });
  NetProbeResult result;
  v1::FetchResponse response;
  // The clock starts at the first byte, so connection set-up is not counted.
  absl::Time first = absl::InfiniteFuture(), last = absl::InfiniteFuture();
  uint64_t first_bytes = 0;
  const absl::Time deadline = absl::Now() + options.max_time;
  bool cut_short = false;
  while (call->Read(&response)) {
    const absl::Time now = absl::Now();
    uint64_t bytes = 0;
    for (const v1::Sample& s : response.samples()) bytes += s.payload().size();
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
  if (!cut_short && !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("bandwidth probe of storage server ",
                                                    client->address(), " failed: ",
                                                    status.message()));
  }
  result.seconds = first < last ? absl::ToDoubleSeconds(last - first) : 0;
  if (result.seconds <= 0 || result.bytes <= first_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bandwidth probe of ", client->address(), " moved too little data to measure (",
        result.bytes, " bytes); pass --net-bw explicitly"));
  }
  result.bytes_per_second = (result.bytes - first_bytes) / result.seconds;
  return result;
}

}  // namespace sophon
