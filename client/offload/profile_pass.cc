#include "client/offload/profile_pass.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/loader/sampler.h"
#include "sophon/net/wire.h"
#include "sophon/planning/epoch_crops.h"
#include "sophon/planning/profile_csv.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// Epoch number whose augmentations the profiling pass uses.
constexpr uint64_t kProfileEpoch = 0;

// Every sample RAW, recording the op times the loader measured for each.
class RecordingRawPolicy final : public OffloadPolicy {
 public:
  explicit RecordingRawPolicy(uint64_t n) : times_(n), bytes_(n), ok_(n, 0), sizes_(n) {}
  std::string name() const override { return "profile"; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t>, absl::Span<SampleAssignment> out) override {
    for (SampleAssignment& a : out) a = SampleAssignment{kFirstStage, SampleAssignment::kAnyServer};
  }
  void OnSample(const SampleObservation& obs) override {
    absl::MutexLock lock(&mu_);
    if (obs.id >= times_.size()) return;
    times_[obs.id] = obs.local;
    bytes_[obs.id] = obs.local_bytes;
    ok_[obs.id] = obs.ok;
    sizes_[obs.id] = {obs.image_width, obs.image_height};
  }
  std::vector<OpTimes> times() const {
    absl::MutexLock lock(&mu_);
    return times_;
  }
  std::vector<PerStage<uint64_t>> bytes() const {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }
  std::vector<char> ok() const {
    absl::MutexLock lock(&mu_);
    return ok_;
  }
  // Each image's width and height (0, 0 when its header was not read).
  std::vector<std::pair<uint32_t, uint32_t>> sizes() const {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<OpTimes> times_ ABSL_GUARDED_BY(mu_);
  std::vector<PerStage<uint64_t>> bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<char> ok_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint32_t, uint32_t>> sizes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// Prep workers sharing a CPU quota smaller than their number are each slowed
// by prep_workers / cpu_limit; the cost model charges the storage node's work
// to min(prep workers, cpu limit) CPUs, so wall times measured on one prep
// worker are scaled by this factor (1 without such a quota) to count the
// quota once.
double StorageWallScale(const ServerManifest& manifest) {
  if (manifest.cpu_limit <= 0 || manifest.prep_workers == 0) return 1.0;
  return std::min(1.0, manifest.cpu_limit / manifest.prep_workers);
}

// The storage node's time for a sample's ops, without the file read (the cost
// model charges it per byte). Without a binding CPU quota (wall_scale 1): its
// prep worker's wall time, above the CPU time when it shares cores. Under one,
// which the cost model charges through the storage CPU count: CPU time, which
// throttling does not stretch (wall times under a quota move in bursts of the
// quota period).
double ServerOpSeconds(double wall, double cpu, double read, double wall_scale) {
  if (wall_scale < 1) return std::max(0.0, cpu - wall_scale * read);
  return std::max(0.0, std::max(wall, cpu) - read);
}

absl::StatusOr<DatasetProfile> ProfileOverNetwork(SampleClient* client,
                                                  const LoaderOptions& loader_options,
                                                  int speed_probe_samples) {
  const ServerManifest& manifest = client->manifest();
  const uint64_t n = manifest.num_samples();
  const int s = loader_options.pipeline.augment.crop_size;
  const absl::Time start = absl::Now();
  spdlog::info("profiling {} samples of '{}' through {} (a pass without training)", n,
               manifest.dataset_name, client->address());

  LoaderOptions options = loader_options;
  options.on_bad_sample = BadSamplePolicy::kSkip;
  options.drop_last = false;
  options.rank = 0;
  options.world = 1;
  options.measure_skipped_ops = true;
  // Every sample measured from the server's bytes: one served from this node's cache would
  // skip the observation (its times and its image's size).
  options.sample_cache = nullptr;
  RecordingRawPolicy all_raw(n);
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client, options, &all_raw);
  if (!loader.ok()) return loader.status();
  if (absl::Status st = (*loader)->StartEpoch(kProfileEpoch); !st.ok()) return st;
  Batch batch;
  int64_t done = 0, next_log = 1;
  while (true) {
    absl::StatusOr<bool> more = (*loader)->Next(&batch);
    if (!more.ok()) {
      return absl::Status(more.status().code(),
                          absl::StrCat("profiling pass: ", more.status().message()));
    }
    if (!*more) break;
    done += batch.n;
    if (done * 10 >= next_log * static_cast<int64_t>(n)) {
      spdlog::info("profiling: {}/{} samples", done, n);
      next_log = done * 10 / static_cast<int64_t>(n) + 1;
    }
  }
  (*loader)->Stop();
  const std::vector<OpTimes> times = all_raw.times();
  const std::vector<PerStage<uint64_t>> local_bytes = all_raw.bytes();
  const std::vector<char> ok = all_raw.ok();
  const std::vector<std::pair<uint32_t, uint32_t>> sizes = all_raw.sizes();

  DatasetProfile profile;
  profile.dataset = manifest.dataset_name;
  profile.fingerprint = manifest.fingerprint;
  profile.crop_size = s;
  profile.times_source = TimesSource::kMeasured;
  profile.samples.resize(n);
  profile.stages = StageSet::All();  // measured up to the job's last stage
  for (Stage stage : AllStages()) {
    if (stage > options.target) profile.stages.Remove(stage);
  }
  uint64_t declined = 0;
  for (uint64_t id = 0; id < n; ++id) {
    SampleProfile& p = profile.samples[id];
    p.id = id;
    p.bytes[kFirstStage] = std::max<uint64_t>(1, manifest.raw_sizes[id]);
    SetSizedStageBytes(s, &p);
    // A stage whose size the crop size does not fix (opaque, after the first)
    // is as large as the pass saw it; a bad sample counts as its file size.
    p.client = times[id];  // zero for a bad sample: nothing to offload
    p.width = sizes[id].first;
    p.height = sizes[id].second;
    const CropExtent crop = CropExtentOf(SampleKey{options.seed, kProfileEpoch, id}, p.width,
                                         p.height, options.pipeline.augment);
    p.crop_part = crop.part;
    p.crop_reach = crop.reach;
    for (Stage stage : AllStages()) {
      if (stage > options.target) {
        p.bytes[stage] = 0;  // past the job's last stage: not measured
        continue;
      }
      if (stage == kFirstStage || StagePayloadBytes(stage, s) >= 0) continue;
      p.bytes[stage] = local_bytes[id][stage] > 0 ? local_bytes[id][stage] : p.bytes[kFirstStage];
    }
    // A file that cannot be cropped losslessly is sent whole when asked for
    // JPEG_CROP (MeasureSkippedOps counts it so).
    if (ok[id] && p.bytes[Stage::kJpegCrop] >= p.bytes[kFirstStage]) ++declined;
  }

  // The server does the same work (same epoch, seed and ids) on a few samples.
  std::vector<uint64_t> probe_ids;
  for (uint64_t id : EpochOrder(options.seed, kProfileEpoch, n, options.shuffle)) {
    if (ok[id]) probe_ids.push_back(id);
    if (static_cast<int>(probe_ids.size()) == speed_probe_samples) break;
  }
  const double wall_scale = StorageWallScale(manifest);
  double server_s = 0, local_s = 0;
  // The probe takes samples as far as the job does, and as far as the server
  // can (FEATURES needs its backbone, PREDICTIONS this node's head too).
  const Stage probe_stage =
      std::min(options.target, ServedStage(manifest, options.pipeline.backbone));
  if (!probe_ids.empty()) {
    std::unique_ptr<FetchCall> call = client->OpenFetch();
    FetchRequestBuilder builder(kProfileEpoch, options.seed, options.pipeline);
    for (uint64_t id : probe_ids) builder.Add(id, probe_stage);
    call->Write(builder.Take());
    call->WritesDone();
    v1::FetchResponse response;
    while (call->Read(&response)) {
      for (const v1::Sample& sample : response.samples()) {
        if (!SampleStatus(sample).ok() || sample.id() >= n) continue;
        const OpTimes& t = times[sample.id()];
        server_s += ServerOpSeconds(sample.server_wall_seconds(), sample.server_cpu_seconds(),
                                    sample.server_read_seconds(), wall_scale);
        local_s += t.Between(kFirstStage, probe_stage);
      }
    }
    if (absl::Status st = call->Finish(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("server speed probe of ", client->address(),
                                                  " failed: ", st.message()));
    }
  }
  profile.server_speed_factor = server_s > 0 && local_s > 0 ? server_s / local_s : 1.0;
  double decode = 0, crop = 0, region_decode = 0, raw_bytes = 0, crop_bytes = 0;
  for (const SampleProfile& p : profile.samples) {
    decode += p.client[Op::kDecodeCrop];
    crop += p.client[Op::kJpegCrop];
    region_decode += p.client[Op::kDecodeJpegCrop];
    raw_bytes += static_cast<double>(p.bytes[Stage::kRaw]);
    crop_bytes += static_cast<double>(p.bytes[Stage::kJpegCrop]);
  }
  const double per = 1e3 / static_cast<double>(std::max<uint64_t>(1, n));
  spdlog::info(
      "profiled {} samples in {:.1f}s: mean decode+crop {:.2f} ms here; lossless crop {:.2f} ms "
      "and {:.1f} KB (file {:.1f} KB, {} files sent whole), its decode {:.2f} ms; the server "
      "needs {:.2f} CPU-s per CPU-s of this node (from {} samples)",
      n, absl::ToDoubleSeconds(absl::Now() - start), decode * per, crop * per,
      crop_bytes * per / 1e6, raw_bytes * per / 1e6, declined, region_decode * per,
      profile.server_speed_factor,
      probe_ids.size());
  if (absl::Status st = profile.Validate(); !st.ok()) return st;
  return profile;
}

absl::Status WriteProfileOverNetwork(SampleClient* client, const LoaderOptions& loader_options,
                                     int speed_probe_samples, const std::string& folder) {
  absl::StatusOr<DatasetProfile> profile =
      ProfileOverNetwork(client, loader_options, speed_probe_samples);
  if (!profile.ok()) return profile.status();
  if (absl::Status st = SaveProfileFolder(*profile, folder); !st.ok()) return st;
  spdlog::info("profile written to {}/{}", folder, kSampleProfileFile);
  return absl::OkStatus();
}

}  // namespace sophon
