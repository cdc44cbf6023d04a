#include "server/service_impl.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sophon/base/cpu_limit.h"
#include "sophon/base/cpu_time.h"
#include "sophon/net/wire.h"
#include "sophon/ops/pipeline.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// How often the reaper looks for idle streams: often enough to end one
// within a few percent of the timeout, at most once a second.
absl::Duration ReaperPeriod(absl::Duration idle_timeout) {
  return std::min(absl::Seconds(1), std::max(absl::Milliseconds(10), idle_timeout / 20));
}

ByteBudget::Options BudgetOptions(const ServiceOptions& options) {
  ByteBudget::Options o;
  o.capacity = options.inflight_budget_bytes;
  o.max_peer_bytes = options.PeerInflightBytes();
  // Freed memory goes back to the system once the bytes in flight fall to a
  // thirty-second of the budget (32 MiB at the defaults), not only when
  // nothing at all is in flight: a light client must not keep a burst's
  // memory resident.
  o.quiet_bytes = options.inflight_budget_bytes / 32;
  return o;
}

ReadSlots::Options SlotOptions(const ServiceOptions& options) {
  ReadSlots::Options o;
  o.slots = options.ReadingStreams();
  o.max_per_peer = options.ReadingStreamsPerPeer();
  o.probation = options.FirstRequestTimeout();
  return o;
}

// The manifest header's fields that are the server's, not the dataset's.
v1::Manifest ServerSettings(const ServiceOptions& options) {
  v1::Manifest settings;
  settings.set_prep_workers(static_cast<uint32_t>(options.prep_workers));
  settings.set_cpu_limit(options.cpu_limit > 0 ? options.cpu_limit : ProcessCpuLimit());
  settings.set_lenient_jpeg(options.limits.lenient);
  if (options.backbone != nullptr) {
    settings.set_backbone(options.backbone->description());
    settings.set_feature_size(static_cast<uint32_t>(options.backbone->feature_size()));
    settings.set_backbone_fingerprint(options.backbone->fingerprint());
    settings.set_head_fingerprint(options.backbone->head_fingerprint());
    settings.set_head_classes(static_cast<uint32_t>(std::max(0, options.backbone->num_classes())));
  }
  return settings;
}

}  // namespace

SampleServiceImpl::SampleServiceImpl(const SampleSource* source, const ServiceOptions& options)
    : source_(source),
      cache_(dynamic_cast<const CachedSource*>(source)),
      options_(options),
      manifest_pages_(*source, ServerSettings(options), options.manifest_page_bytes),
      declined_files_(source->size()),
      memory_releaser_(options.memory_release),
      budget_(BudgetOptions(options), [this](bool busy) { OnBusyChange(busy); }),
      read_slots_(SlotOptions(options), [this] { return Now(); }),
      unary_calls_(options.max_unary_calls, options.max_unary_calls_per_peer,
                   options.max_waiting_unary_calls, options.unary_wait_timeout,
                   [this](bool busy) { OnBusyChange(busy); }),
      registry_(options.max_streams, options.max_streams_per_peer,
                ReaperPeriod(std::min({options.idle_stream_timeout, options.write_stall_timeout,
                                       options.read_stall_timeout,
                                       options.FirstRequestTimeout()})),
                [this] { return Now(); }),
      pool_(options.prep_workers, /*queue_capacity=*/options.prep_workers * 4) {}

void SampleServiceImpl::OnBusyChange(bool busy) {
  // Freed memory goes back once neither samples nor unary answers are in
  // flight (a burst of unread answers leaves as much behind as samples do).
  if (busy) {
    if (busy_sources_.fetch_add(1) == 0) memory_releaser_.OnBusy();
  } else {
    if (busy_sources_.fetch_sub(1) == 1) memory_releaser_.OnIdle();
  }
}

absl::Status SampleServiceImpl::GetStats(const v1::GetStatsRequest&, v1::ServerStats* response) {
  stats_.Snapshot(response);
  response->set_prep_busy_seconds(pool_.busy_seconds());
  response->set_prep_workers(static_cast<uint32_t>(pool_.workers()));
  response->set_queue_depth(static_cast<uint32_t>(pool_.queue_depth()));
  response->set_max_inflight_per_stream(static_cast<uint32_t>(options_.max_inflight_per_stream));
  response->set_process_cpu_seconds(ProcessCpuSeconds());
  response->set_dataset_fingerprint(source_->fingerprint());
  response->set_inflight_bytes(static_cast<uint64_t>(std::max<int64_t>(0, budget_.used())));
  response->set_inflight_budget_bytes(static_cast<uint64_t>(budget_.capacity()));
  response->set_streams_opened(registry_.streams_opened());
  response->set_peak_inflight_bytes(static_cast<uint64_t>(budget_.peak()));
  response->set_budget_waiters(static_cast<uint32_t>(budget_.waiters()));
  if (cache_ != nullptr) {
    const CacheStats cache = cache_->stats();
    response->set_cache_hits(cache.hits);
    response->set_cache_misses(cache.misses);
    response->set_cache_bytes(static_cast<uint64_t>(cache.bytes));
    response->set_cache_entries(cache.entries);
    response->set_cache_evictions(cache.evicted);
    response->set_cache_capacity_bytes(static_cast<uint64_t>(cache.capacity_bytes));
  }
  return absl::OkStatus();
}

void SampleServiceImpl::RecordRejection(Limit limit, const std::string& peer,
                                        const absl::Status& status) {
  stats_.RecordRejection(limit);
  uint64_t suppressed = 0;
  if (rejection_log_.Allow(absl::Now(), &suppressed)) {
    spdlog::warn("refused a request from {} ({}): {}{}", peer, LimitName(limit),
                 std::string(status.message()),
                 suppressed > 0 ? absl::StrCat(" [", suppressed, " earlier refusals not logged]")
                                : std::string());
  }
}

void SampleServiceImpl::LogStreamEnd(const std::string& line) {
  uint64_t suppressed = 0;
  if (stream_log_.Allow(Now(), &suppressed)) {
    spdlog::info("{}{}", line,
                 suppressed > 0 ? absl::StrCat(" [", suppressed, " earlier stream ends not logged]")
                                : std::string());
  } else {
    spdlog::debug(line);
  }
}

void SampleServiceImpl::FailSample(uint64_t id, Stage stage, const absl::Status& error,
                                   v1::Sample* out) {
  out->clear_payload();
  out->set_id(id);
  if (id < source_->size()) out->set_label(source_->manifest().label(id));
  out->set_stage(StageToProto(stage));
  SetSampleStatus(error, out);
  stats_.RecordFailure(error.code());
}

void SampleServiceImpl::ProcessSample(Stage target, uint64_t id, const SampleKey& key,
                                      const PipelineOptions& options, int64_t reserved_bytes,
                                      v1::Sample* out) {
  if (options_.before_prep) options_.before_prep(id);
  const ManifestTable& manifest = source_->manifest();
  out->set_id(id);
  out->set_label(manifest.label(id));
  const double t0 = ThreadCpuSeconds();
  const absl::Time wall0 = absl::Now();
  SampleSource::ReadInfo read_info;
  absl::StatusOr<std::string> bytes = source_->ReadWithInfo(id, &read_info);
  out->set_server_read_seconds(absl::ToDoubleSeconds(absl::Now() - wall0));
  out->set_cache_hit(read_info.cache_hit);
  absl::Status status = bytes.status();
  if (status.ok()) {
    StageData raw;
    raw.data = *std::move(bytes);
    absl::Status declined;
    absl::StatusOr<StageData> result =
        RunPipeline(std::move(raw), target, key, options, nullptr, nullptr, &declined);
    if (result.ok() && !declined.ok()) {
      // Sent at an earlier stage (a JPEG that cannot be cropped losslessly
      // goes whole): the client finishes it from there.
      stats_.RecordDeclined(target);
      uint64_t suppressed = 0;
      if (declined_files_.First(id) && declined_log_.Allow(absl::Now(), &suppressed)) {
        spdlog::warn("sample {} ({}): sent as {} instead of {}: {}{}", id,
                     std::string(manifest.relative_path(id)), StageName(result->stage),
                     StageName(target), std::string(declined.message()),
                     suppressed > 0 ? absl::StrCat(" [", suppressed,
                                                   " earlier such files not logged]")
                                    : std::string());
      }
    }
    if (result.ok()) {
      StageDataToProto(*std::move(result), out);
      if (static_cast<int64_t>(out->payload().size()) > reserved_bytes) {
        status = absl::ResourceExhaustedError(absl::StrCat(
            "sample ", id, " (", manifest.relative_path(id), "): the file has ", out->payload().size(),
            " bytes, more than the ", reserved_bytes,
            " reserved for it when the server listed the dataset (it grew since); restart the "
            "server to serve it"));
      }
    } else {
      status = absl::Status(result.status().code(),
                            absl::StrCat("sample ", id, " (", manifest.relative_path(id),
                                         "): ", result.status().message()));
    }
  }
  out->set_server_cpu_seconds(ThreadCpuSeconds() - t0);
  out->set_server_wall_seconds(absl::ToDoubleSeconds(absl::Now() - wall0));
  stats_.RecordSampleSeconds(out->server_wall_seconds(), out->server_cpu_seconds(),
                             out->server_read_seconds());
  if (!status.ok()) {
    FailSample(id, target, status, out);
    uint64_t suppressed = 0;
    if (failure_log_.Allow(absl::Now(), &suppressed)) {
      spdlog::warn("{}{}", std::string(status.message()),
                   suppressed > 0
                       ? absl::StrCat(" [", suppressed, " earlier failed samples not logged]")
                       : std::string());
    }
  } else {
    absl::StatusOr<Stage> sent = StageFromProto(out->stage());
    stats_.RecordSample(sent.ok() ? *sent : target, out->payload().size());
  }
}

}  // namespace sophon
