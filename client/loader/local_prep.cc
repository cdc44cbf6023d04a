// The training node's prep threads: each takes a received (or cached) sample
// from the queue, finishes it to the target in its batch's slot (Finish),
// tells the policy what it observed and counts it; a bad sample is skipped or
// fails the epoch (LoaderOptions.on_bad_sample).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/loader/sample_cache.h"
#include "client/loader/stream_loader.h"
#include "sophon/base/half.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {

void StreamLoader::WorkerLoop(const EpochPlan& plan) {
  while (true) {
    WorkItem item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !work_.empty() || streams_open_ == 0 || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (work_.empty() || stopping_) return;
      item = std::move(work_.front());
      work_.pop_front();
    }
    const uint64_t id = item.id;
    const uint64_t bytes = item.sample.payload().size();
    OpTimes times;
    PerStage<uint64_t> stage_bytes;
    absl::Status status = SampleStatus(item.sample);
    absl::StatusOr<Stage> stage = StageFromProto(item.sample.stage());
    const Stage received_stage = stage.ok() ? *stage : kFirstStage;
    uint32_t image_width = 0, image_height = 0;
    // A file that arrived whole is offered to the sample cache (before its
    // payload moves into the pipeline).
    bool kept = false;
    if (status.ok() && !item.from_cache && options_.sample_cache != nullptr &&
        received_stage == kFirstStage) {
      kept = options_.sample_cache->Put(id, item.sample.payload());
    }
    if (status.ok()) {
      absl::StatusOr<StageData> data = StageDataFromProto(&item.sample);
      status = data.status();
      if (status.ok() && options_.measure_skipped_ops) {
        status = MeasureSkippedOps(*data, SampleKey{options_.seed, plan.epoch, id},
                                   options_.pipeline, &times, &stage_bytes);
        if (status.ok() && data->stage == kFirstStage) {
          // The profile keeps the image's size: a planner draws any epoch's crop box from it.
          absl::StatusOr<ImageInfo> info = ReadJpegInfo(data->data, options_.pipeline.limits);
          if (info.ok()) {
            image_width = static_cast<uint32_t>(info->width);
            image_height = static_cast<uint32_t>(info->height);
          }
        }
      }
      if (status.ok()) {
        status = Finish(*std::move(data), plan.epoch, id, item.batch, item.slot, &times,
                        &stage_bytes);
        if (!status.ok()) {
          status = absl::Status(
              status.code(),
              absl::StrCat("sample ", id, " (", servers_->RelativePath(id, item.server),
                           item.from_cache ? " from this node's sample cache"
                                           : absl::StrCat(" from ", servers_->address(item.server)),
                           ", prepared locally from ", StageName(received_stage),
                           "): ", status.message()));
        }
      }
    }
    SampleObservation obs;
    obs.id = id;
    obs.server = item.server;
    obs.received = received_stage;
    obs.payload_bytes = bytes;
    obs.local = times;
    obs.local_bytes = stage_bytes;
    obs.server_cpu_seconds = item.sample.server_cpu_seconds();
    obs.server_wall_seconds = item.sample.server_wall_seconds();
    obs.server_read_seconds = item.sample.server_read_seconds();
    obs.cache_hit = item.sample.cache_hit();
    obs.ok = status.ok();
    obs.image_width = image_width;
    obs.image_height = image_height;
    // A cache hit crossed no link and no server: not an observation of them.
    if (!item.from_cache) policy_->OnSample(obs);  // outside the lock: the policy has its own
    absl::MutexLock lock(&mu_);
    queued_payload_bytes_ -= std::min<uint64_t>(queued_payload_bytes_, bytes);
    stats_.local_cpu_seconds += times.Total();
    stats_.server_cpu_seconds += item.sample.server_cpu_seconds();
    if (kept) stats_.sample_cache_inserted++;
    if (status.ok() && item.from_cache) {
      // Counted in sample_cache_hits, not as received.
    } else if (status.ok()) {
      stats_.samples_by_stage[StageIndex(received_stage)]++;
      stats_.bytes_by_stage[StageIndex(received_stage)] += bytes;
    } else if (options_.on_bad_sample == BadSamplePolicy::kSkip) {
      item.batch->bad[item.slot] = 1;
      stats_.skipped++;
      if (stats_.first_errors.size() < 5) {
        stats_.first_errors.push_back(std::string(status.message()));
        spdlog::warn("skipping bad sample: {}", std::string(status.message()));
      }
    } else {
      FailLocked(absl::Status(status.code(),
                              absl::StrCat(status.message(), " (bad-sample policy: fail)")));
    }
    item.batch->remaining--;
    if (item.batch->remaining == 0 && item.batch->claim.held() && error_.ok() && !stopping_) {
      // Made: the other jobs of the node read it (Next waits for the write).
      item.batch->publishing = true;
      mu_.Unlock();
      PublishBatch(item.batch);
      mu_.Lock();
    }
  }
}

absl::Status StreamLoader::Finish(StageData data, uint64_t epoch, uint64_t id,
                                  PendingBatch* batch, int slot, OpTimes* times,
                                  PerStage<uint64_t>* stage_bytes) {
  const SampleKey key{options_.seed, epoch, id};
  if (options_.target == Stage::kTensor) {
    return FinishToTensor(std::move(data), key, options_.pipeline,
                          batch->images.data() + slot * sample_values_, times, stage_bytes);
  }
  if (vector_target_) {
    absl::StatusOr<StageData> out =
        RunPipeline(std::move(data), options_.target, key, options_.pipeline, times, stage_bytes);
    if (!out.ok()) return out.status();
    if (out->width != sample_values_) {
      return absl::InvalidArgumentError(absl::StrCat(StageName(options_.target), " of ",
                                                     out->width, " values, expected ",
                                                     sample_values_));
    }
    float* const dst = batch->images.data() + slot * sample_values_;
    if (GetStageInfo(options_.target).dtype == DType::kFloat16) {
      const auto* halves = reinterpret_cast<const uint16_t*>(out->data.data());
      HalvesToFloats(halves, sample_values_, dst);
      if (feature_cache_ != nullptr) feature_cache_->Put(id, halves);
    } else {
      std::memcpy(dst, out->data.data(), sizeof(float) * sample_values_);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<StageData> out =
      RunPipeline(std::move(data), options_.target, key, options_.pipeline, times, stage_bytes);
  if (!out.ok()) return out.status();
  if (static_cast<int64_t>(out->data.size()) != sample_values_) {
    return absl::InternalError(absl::StrCat(StageName(options_.target), " payload has ",
                                            out->data.size(), " bytes, expected ",
                                            sample_values_));
  }
  std::memcpy(batch->pixels.data() + slot * sample_values_, out->data.data(), sample_values_);
  return absl::OkStatus();
}

}  // namespace sophon
