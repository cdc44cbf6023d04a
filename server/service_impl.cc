#include "server/service_impl.h"

#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "sophon/base/cpu_time.h"
#include "sophon/base/cpu_limit.h"
#include "sophon/ops/pipeline.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {

absl::Status ServiceOptions::Validate() const {
  if (prep_workers < 1 || prep_workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.prep_workers must be in [1, 1024], got ", prep_workers));
  }
  if (max_inflight_per_stream < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.max_inflight_per_stream must be at least 1, got ",
                     max_inflight_per_stream));
  }
  if (!(cpu_limit >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.cpu_limit must be >= 0 (0 = detect), got ", cpu_limit));
  }
  if (max_samples_per_message < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_samples_per_message must be at least 1, got ",
        max_samples_per_message));
  }
  if (limits.max_pixels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.limits.max_pixels must be at least 1, got ", limits.max_pixels));
  }
  return absl::OkStatus();
}

SampleServiceImpl::SampleServiceImpl(const SampleSource* source, const ServiceOptions& options)
    : source_(source),
      options_(options),
      pool_(options.prep_workers, /*queue_capacity=*/options.prep_workers * 4) {}

absl::Status SampleServiceImpl::GetManifest(const v1::GetManifestRequest&,
                                            v1::Manifest* response) {
  response->set_dataset_name(source_->name());
  response->set_fingerprint(source_->fingerprint());
  response->set_num_samples(static_cast<uint32_t>(source_->size()));
  for (const std::string& c : source_->class_names()) response->add_class_names(c);
  response->mutable_labels()->Reserve(static_cast<int>(source_->size()));
  response->mutable_raw_sizes()->Reserve(static_cast<int>(source_->size()));
  for (const ManifestEntry& e : source_->entries()) {
    response->add_labels(e.label);
    response->add_raw_sizes(e.raw_size);
    response->add_relative_paths(e.relative_path);
  }
  response->set_prep_workers(static_cast<uint32_t>(pool_.workers()));
  response->set_cpu_limit(options_.cpu_limit > 0 ? options_.cpu_limit : ProcessCpuLimit());
  return absl::OkStatus();
}

absl::Status SampleServiceImpl::GetStats(const v1::GetStatsRequest&, v1::ServerStats* response) {
  stats_.Snapshot(response);
  response->set_prep_busy_seconds(pool_.busy_seconds());
  response->set_prep_workers(static_cast<uint32_t>(pool_.workers()));
  response->set_queue_depth(static_cast<uint32_t>(pool_.queue_depth()));
  response->set_max_inflight_per_stream(static_cast<uint32_t>(options_.max_inflight_per_stream));
  response->set_process_cpu_seconds(ProcessCpuSeconds());
  response->set_dataset_fingerprint(source_->fingerprint());
  return absl::OkStatus();
}

void SampleServiceImpl::ProcessSample(uint64_t id, Stage target, const SampleKey& key,
                                      const PipelineOptions& options, v1::Sample* out) {
  if (options_.before_prep) options_.before_prep(id);
  const ManifestEntry& entry = source_->entry(id);
  out->set_id(id);
  out->set_label(entry.label);
  const double t0 = ThreadCpuSeconds();
  const absl::Time wall0 = absl::Now();
  absl::StatusOr<std::string> bytes = source_->Read(id);
  out->set_server_read_seconds(absl::ToDoubleSeconds(absl::Now() - wall0));
  absl::Status status = bytes.status();
  if (status.ok()) {
    StageData raw;
    raw.data = *std::move(bytes);
    absl::StatusOr<StageData> result = RunPipeline(std::move(raw), target, key, options);
    if (result.ok()) {
      StageDataToProto(*std::move(result), out);
    } else {
      status = absl::Status(result.status().code(),
                            absl::StrCat("sample ", id, " (", entry.relative_path,
                                         "): ", result.status().message()));
    }
  }
  out->set_server_cpu_seconds(ThreadCpuSeconds() - t0);
  out->set_server_wall_seconds(absl::ToDoubleSeconds(absl::Now() - wall0));
  if (!status.ok()) {
    out->set_stage(static_cast<v1::Stage>(target));
    SetSampleStatus(status, out);
    stats_.RecordFailure();
    spdlog::warn("{}", std::string(status.message()));
  } else {
    stats_.RecordSample(target, out->payload().size());
  }
}

namespace {

// State shared by one stream's reader thread, the prep jobs and the writer.
struct StreamState {
  absl::Mutex mu;
  std::deque<v1::Sample> done ABSL_GUARDED_BY(mu);
  int inflight ABSL_GUARDED_BY(mu) = 0;  // accepted, not yet taken by the writer
  int jobs_running ABSL_GUARDED_BY(mu) = 0;
  bool reader_done ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);
};

}  // namespace

absl::Status SampleServiceImpl::Fetch(FetchStream* stream) {
  stats_.StreamOpened();
  StreamState st;
  const int limit = options_.max_inflight_per_stream;

  // Reader: accepts requests while fewer than `limit` samples are in flight;
  // when it stops reading, gRPC flow control pushes back on the client.
  std::thread reader([&] {
    v1::FetchRequest request;
    absl::Status error;
    while (error.ok() && stream->Read(&request)) {
      absl::StatusOr<AugmentOptions> augment = FromProto(request.augment());
      if (!augment.ok()) {
        error = absl::InvalidArgumentError(
            absl::StrCat("bad augmentation parameters: ", augment.status().message()));
        break;
      }
      PipelineOptions popts;
      popts.augment = *augment;
      popts.limits = options_.limits;
      for (const v1::SampleRequest& sr : request.samples()) {
        if (sr.id() >= source_->size()) {
          error = absl::OutOfRangeError(absl::StrCat("sample ", sr.id(),
                                                     " is outside the manifest of ",
                                                     source_->size(), " samples"));
          break;
        }
        const absl::StatusOr<Stage> target = StageFromProto(sr.target_stage());
        if (!target.ok()) {
          error = absl::InvalidArgumentError(
              absl::StrCat("sample ", sr.id(), ": unknown target stage ", sr.target_stage()));
          break;
        }
        {
          absl::MutexLock lock(&st.mu);
          auto has_room = [&st, limit]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return st.inflight < limit || st.cancelled;
          };
          st.mu.Await(absl::Condition(&has_room));
          if (st.cancelled) break;
          ++st.inflight;
          ++st.jobs_running;
          stats_.ObserveStreamInflight(static_cast<uint32_t>(st.inflight));
          stats_.AddInflight(1);
        }
        const SampleKey key{request.seed(), request.epoch(), sr.id()};
        pool_.Submit([this, &st, key, target = *target, popts] {
          v1::Sample sample;
          ProcessSample(key.id, target, key, popts, &sample);
          absl::MutexLock lock(&st.mu);
          st.done.push_back(std::move(sample));
          --st.jobs_running;
        });
      }
      absl::MutexLock lock(&st.mu);
      if (st.cancelled) break;
    }
    absl::MutexLock lock(&st.mu);
    if (!error.ok()) {
      st.error = error;
      stats_.RecordRejectedRequest();
    }
    st.reader_done = true;
  });

  // Writer (this gRPC thread): batches finished samples into messages.
  absl::Status result;
  while (true) {
    v1::FetchResponse response;
    int taken = 0;
    {
      absl::MutexLock lock(&st.mu);
      st.mu.Await(absl::Condition(
          +[](StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
            return !s->done.empty() || (s->reader_done && s->jobs_running == 0) ||
                   !s->error.ok();
          },
          &st));
      if (!st.error.ok()) {
        result = st.error;
        break;
      }
      if (st.done.empty()) break;  // reader finished and every job written
      int64_t bytes = 0;
      while (!st.done.empty() && taken < options_.max_samples_per_message &&
             (taken == 0 || bytes + static_cast<int64_t>(st.done.front().payload().size()) <=
                                options_.max_message_bytes)) {
        bytes += static_cast<int64_t>(st.done.front().payload().size());
        *response.add_samples() = std::move(st.done.front());
        st.done.pop_front();
        ++taken;
      }
      st.inflight -= taken;
      stats_.AddInflight(-taken);
    }
    if (!stream->Write(response)) {
      result = absl::CancelledError("client went away");
      break;
    }
  }
  // Unblock the reader and wait for every job that points at `st`.
  {
    absl::MutexLock lock(&st.mu);
    st.cancelled = true;
  }
  reader.join();
  {
    absl::MutexLock lock(&st.mu);
    st.mu.Await(absl::Condition(
        +[](StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->jobs_running == 0; },
        &st));
    stats_.AddInflight(-st.inflight);
  }
  stats_.StreamClosed();
  return result;
}

}  // namespace sophon
