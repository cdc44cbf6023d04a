#include "smartoff.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "net_probe.h"
#include "sampler.h"
#include "sophon/profile_csv.h"
#include "sophon/cost_model.h"
#include "sophon/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// Offloaded work (client CPU seconds) below which a storage speed measurement
// is too noisy to act on.
constexpr double kMinSpeedEvidenceSeconds = 0.05;

// Epoch number whose augmentations the profiling pass uses.
constexpr uint64_t kProfileEpoch = 0;

std::string DescribePlan(const PlanResult& plan) {
  const PlanCost& c = plan.cost;
  return absl::StrFormat(
      "predicted %.2fs (network %.2fs, storage CPU %.2fs, local CPU %.2fs, GPU %.2fs; "
      "bottleneck %s; lower bound %.2fs), %.1f MB on the wire, stages raw=%d cropped=%d "
      "flipped=%d tensor=%d",
      c.epoch_s, c.net_s, c.remote_s, c.local_s, c.gpu_s, ResourceName(c.bottleneck),
      plan.lower_bound_s, c.wire_bytes / 1e6, c.samples_per_stage[0], c.samples_per_stage[1],
      c.samples_per_stage[2], c.samples_per_stage[3]);
}

// Prep workers sharing a CPU quota smaller than their number are each slowed
// by prep_workers / cpu_limit; the cost model charges the storage node's work
// to min(prep workers, cpu limit) CPUs, so wall times measured on one prep
// worker are scaled by this factor (1 without such a quota) to count the
// quota once.
double StorageWallScale(const v1::Manifest& manifest) {
  if (manifest.cpu_limit() <= 0 || manifest.prep_workers() == 0) return 1.0;
  return std::min(1.0, manifest.cpu_limit() / manifest.prep_workers());
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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

absl::Status SmartoffOptions::Validate() const {
  if (net_bw_mbit < 0) return absl::InvalidArgumentError("--net-bw must be positive or auto");
  if (remote_cpus < 0) return absl::InvalidArgumentError("--remote-cpus must be >= 0");
  if (!(replan_threshold > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replan-threshold must be > 0, got ", replan_threshold));
  }
  if (replan_min_samples < 1) {
    return absl::InvalidArgumentError("--replan-min-samples must be at least 1");
  }
  if (speed_probe_samples < 1) {
    return absl::InvalidArgumentError("speed probe samples must be at least 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetProfile> ProfileOverNetwork(SampleClient* client,
                                                  const LoaderOptions& loader_options,
                                                  int speed_probe_samples) {
  const v1::Manifest& manifest = client->manifest();
  const uint64_t n = manifest.num_samples();
  const int s = loader_options.pipeline.augment.crop_size;
  const absl::Time start = absl::Now();
  spdlog::info("profiling {} samples of '{}' through {} (a pass without training)", n,
               manifest.dataset_name(), client->address());

  absl::Mutex mu;
  std::vector<OpTimes> times(n);
  std::vector<char> ok(n, 0);
  LoaderOptions options = loader_options;
  options.on_bad_sample = BadSamplePolicy::kSkip;
  options.drop_last = false;
  options.rank = 0;
  options.world = 1;
  options.observer = [&](const SampleObservation& obs) {
    absl::MutexLock lock(&mu);
    times[obs.id] = obs.local;
    ok[obs.id] = obs.ok;
  };
  FixedPlanner all_raw(Stage::kRaw);
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

  DatasetProfile profile;
  profile.dataset = manifest.dataset_name();
  profile.fingerprint = manifest.fingerprint();
  profile.crop_size = s;
  profile.times_source = TimesSource::kMeasured;
  profile.samples.resize(n);
  for (uint64_t id = 0; id < n; ++id) {
    SampleProfile& p = profile.samples[id];
    p.id = id;
    p.raw_bytes = std::max<uint64_t>(1, manifest.raw_sizes(static_cast<int>(id)));
    p.cropped_bytes = StagePayloadBytes(Stage::kCropped, s);
    p.flipped_bytes = StagePayloadBytes(Stage::kFlipped, s);
    p.tensor_bytes = StagePayloadBytes(Stage::kTensor, s);
    p.client = times[id];  // zero for a bad sample: nothing to offload
  }

  // The server does the same work (same epoch, seed and ids) on a few samples.
  std::vector<uint64_t> probe_ids;
  for (uint64_t id : EpochOrder(options.seed, kProfileEpoch, n, options.shuffle)) {
    if (ok[id]) probe_ids.push_back(id);
    if (static_cast<int>(probe_ids.size()) == speed_probe_samples) break;
  }
  const double wall_scale = StorageWallScale(manifest);
  double server_s = 0, local_s = 0;
  if (!probe_ids.empty()) {
    std::unique_ptr<FetchCall> call = client->OpenFetch();
    v1::FetchRequest request;
    request.set_epoch(kProfileEpoch);
    request.set_seed(options.seed);
    *request.mutable_augment() = ToProto(options.pipeline.augment);
    for (uint64_t id : probe_ids) {
      v1::SampleRequest* sr = request.add_samples();
      sr->set_id(id);
      sr->set_target_stage(v1::STAGE_TENSOR);
    }
    call->Write(request);
    call->WritesDone();
    v1::FetchResponse response;
    while (call->Read(&response)) {
      for (const v1::Sample& sample : response.samples()) {
        if (!SampleStatus(sample).ok() || sample.id() >= n) continue;
        const OpTimes& t = times[sample.id()];
        server_s += ServerOpSeconds(sample.server_wall_seconds(), sample.server_cpu_seconds(),
                                    sample.server_read_seconds(), wall_scale);
        local_s += t.decode_crop + t.flip + t.tensor;
      }
    }
    if (absl::Status st = call->Finish(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("server speed probe of ", client->address(),
                                                  " failed: ", st.message()));
    }
  }
  profile.server_speed_factor = server_s > 0 && local_s > 0 ? server_s / local_s : 1.0;
  double decode = 0;
  for (const OpTimes& t : times) decode += t.decode_crop;
  spdlog::info(
      "profiled {} samples in {:.1f}s: mean decode+crop {:.2f} ms here; the server needs {:.2f} "
      "CPU-s per CPU-s of this node (from {} samples)",
      n, absl::ToDoubleSeconds(absl::Now() - start), 1e3 * decode / std::max<uint64_t>(1, n),
      profile.server_speed_factor, probe_ids.size());
  if (absl::Status st = profile.Validate(); !st.ok()) return st;
  return profile;
}

SmartoffPlanner::SmartoffPlanner(DatasetProfile profile, Resources resources,
                                 const SmartoffOptions& options, double storage_wall_scale)
    : profile_(std::move(profile)),
      options_(options),
      measure_gpu_(options.gpu_batch_seconds < 0),
      storage_wall_scale_(storage_wall_scale),
      resources_(resources) {}

std::vector<Stage> SmartoffPlanner::PlanEpoch(uint64_t epoch, const std::vector<uint64_t>& order) {
  Resources r;
  {
    absl::MutexLock lock(&mu_);
    // The storage speed measured over the previous epoch (or warm-up), when it
    // offloaded enough work to tell.
    if (epoch_server_predicted_s_ > kMinSpeedEvidenceSeconds) {
      const double speed = epoch_server_actual_s_ / epoch_server_predicted_s_;
      spdlog::info("smartoff: storage node speed {:.2f} over the last epoch (assumed {:.2f})",
                   speed, resources_.remote_speed);
      resources_.remote_speed = speed;
    }
    epoch_server_actual_s_ = 0;
    epoch_server_predicted_s_ = 0;
    r = resources_;
  }
  absl::StatusOr<PlanResult> plan = MakePlan(options_.planner, profile_, r, order);
  if (!plan.ok()) {
    spdlog::error("smartoff: planning epoch {} failed ({}); sending every sample raw", epoch,
                  std::string(plan.status().message()));
    return std::vector<Stage>(order.size(), Stage::kRaw);
  }
  spdlog::info("smartoff epoch {} plan ({}): {}", epoch, PlannerKindName(options_.planner),
               DescribePlan(*plan));
  absl::MutexLock lock(&mu_);
  last_plan_ = *plan;
  epoch_prediction_s_ = plan->cost.epoch_s;
  ResetWindowLocked();
  return plan->stages;
}

void SmartoffPlanner::ResetWindowLocked() {
  observed_ = 0;
  server_actual_s_ = 0;
  server_predicted_s_ = 0;
  window_bytes_ = 0;
  window_start_ = absl::InfiniteFuture();
}

void SmartoffPlanner::Observe(const SampleObservation& obs) {
  if (obs.id >= profile_.samples.size()) return;
  const double predicted = OpSecondsBetween(profile_.samples[obs.id].client, Stage::kRaw,
                                            obs.received);
  absl::MutexLock lock(&mu_);
  if (window_start_ == absl::InfiniteFuture()) {
    window_start_ = absl::Now();  // the rate is measured from the first arrival on
    return;
  }
  ++observed_;
  window_bytes_ += obs.payload_bytes;
  if (obs.ok && obs.received != Stage::kRaw) {
    // Wall time where the storage node shares its cores: it is slower per
    // sample though each sample costs it the same CPU time (ServerOpSeconds).
    const double actual = ServerOpSeconds(obs.server_wall_seconds, obs.server_cpu_seconds,
                                          obs.server_read_seconds, storage_wall_scale_);
    server_actual_s_ += actual;
    server_predicted_s_ += predicted;
    epoch_server_actual_s_ += actual;
    epoch_server_predicted_s_ += predicted;
  }
}

void SmartoffPlanner::ObserveStep(double seconds) {
  absl::MutexLock lock(&mu_);
  step_seconds_.push_back(seconds);
}

bool SmartoffPlanner::MaybeReplan(Loader* loader) {
  const double th = options_.replan_threshold;
  std::vector<std::string> reasons;
  Resources r;
  {
    absl::MutexLock lock(&mu_);
    r = resources_;
    // Step time: the first step is warm-up; decide after three more.
    if (measure_gpu_ && step_seconds_.size() >= 4) {
      const double g =
          Median(std::vector<double>(step_seconds_.begin() + 1, step_seconds_.end()));
      const double old = resources_.gpu_seconds_per_batch;
      if (old == 0 || std::abs(g / old - 1) > th) {
        r.gpu_seconds_per_batch = g;
        reasons.push_back(absl::StrFormat("training step measured %.3fs/batch (assumed %.3fs)",
                                          g, old));
      }
      step_seconds_.erase(step_seconds_.begin() + 1, step_seconds_.end());
    }
    if (observed_ >= options_.replan_min_samples) {
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - window_start_);
      const double rate = elapsed > 0 ? window_bytes_ / elapsed : 0;
      if (server_predicted_s_ > kMinSpeedEvidenceSeconds) {
        const double speed = server_actual_s_ / server_predicted_s_;
        if (std::abs(speed / resources_.remote_speed - 1) > th) {
          r.remote_speed = speed;
          reasons.push_back(absl::StrFormat("storage node speed %.2f (assumed %.2f)", speed,
                                            resources_.remote_speed));
        }
      }
      // A saturated link shows its bandwidth; an unsaturated one only a lower
      // bound. A rate below the assumed bandwidth is blamed on the link only
      // when the plan expected the link to limit and the storage node, busy
      // less than 80% of the window, was not what held it back.
      const bool net_bound = last_plan_.cost.bottleneck == Resource::kNetwork;
      const double server_busy =
          elapsed > 0 && resources_.remote_cpus > 0
              ? server_actual_s_ / (elapsed * resources_.remote_cpus)
              : 0;
      const bool link_limited = net_bound && server_busy < 0.8;
      const double bw = resources_.net_bytes_per_s;
      if (rate > 0 && ((link_limited && rate < (1 - th) * bw) || rate > (1 + th) * bw)) {
        r.net_bytes_per_s = rate;
        reasons.push_back(absl::StrFormat("network %.1f Mbit/s (assumed %.1f)", rate * 8 / 1e6,
                                          bw * 8 / 1e6));
      }
      ResetWindowLocked();
    }
    if (reasons.empty()) return false;
    resources_ = r;
  }
  const int64_t from = loader->sent_position();
  const std::vector<uint64_t>& order = loader->order();
  if (from >= static_cast<int64_t>(order.size())) return false;
  std::vector<uint64_t> rest(order.begin() + from, order.end());
  absl::StatusOr<PlanResult> plan = MakePlan(options_.planner, profile_, r, rest);
  if (!plan.ok()) {
    spdlog::error("smartoff: re-planning failed: {}", std::string(plan.status().message()));
    return false;
  }
  const int64_t changed = loader->UpdatePlan(from, plan->stages);
  spdlog::info("smartoff re-plan at sample {}/{} ({}): {} stages changed; remaining {}", from,
               order.size(), absl::StrJoin(reasons, ", "), changed, DescribePlan(*plan));
  absl::MutexLock lock(&mu_);
  last_plan_ = *plan;
  ++replans_;
  return true;
}

Resources SmartoffPlanner::resources() const {
  absl::MutexLock lock(&mu_);
  return resources_;
}

PlanResult SmartoffPlanner::last_plan() const {
  absl::MutexLock lock(&mu_);
  return last_plan_;
}

double SmartoffPlanner::epoch_prediction_seconds() const {
  absl::MutexLock lock(&mu_);
  return epoch_prediction_s_;
}

int SmartoffPlanner::replans() const {
  absl::MutexLock lock(&mu_);
  return replans_;
}

absl::Status WriteProfileOverNetwork(SampleClient* client, const LoaderOptions& loader_options,
                                     const SmartoffOptions& options, const std::string& folder) {
  absl::StatusOr<DatasetProfile> profile =
      ProfileOverNetwork(client, loader_options, options.speed_probe_samples);
  if (!profile.ok()) return profile.status();
  if (absl::Status st = SaveProfileFolder(*profile, folder); !st.ok()) return st;
  spdlog::info("profile written to {}/{}", folder, kSampleProfileFile);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SmartoffPlanner>> CreateSmartoffPlanner(
    SampleClient* client, const LoaderOptions& loader_options, const SmartoffOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  const v1::Manifest& manifest = client->manifest();
  const std::string folder = options.profile_folder.empty()
                                 ? DefaultProfileFolder(manifest.dataset_name())
                                 : options.profile_folder;
  const int s = loader_options.pipeline.augment.crop_size;
  absl::StatusOr<DatasetProfile> profile = LoadProfileFolder(folder, manifest.fingerprint());
  bool need_profile = false;
  if (profile.ok()) {
    if (profile->crop_size != s || profile->samples.size() != manifest.num_samples()) {
      spdlog::info("profile in {} was taken at crop size {} for {} samples; re-profiling", folder,
                   profile->crop_size, profile->samples.size());
      need_profile = true;
    } else {
      spdlog::info("smartoff: using the profile in {} ({} samples, server speed factor {:.2f})",
                   folder, profile->samples.size(), profile->server_speed_factor);
    }
  } else if (absl::IsNotFound(profile.status())) {
    spdlog::info("smartoff: no profile for dataset '{}' in {}", manifest.dataset_name(), folder);
    need_profile = true;
  } else {
    return absl::Status(profile.status().code(),
                        absl::StrCat(profile.status().message(),
                                     " (remove it, or pass --profile-folder for this dataset)"));
  }
  if (need_profile) {
    profile = ProfileOverNetwork(client, loader_options, options.speed_probe_samples);
    if (!profile.ok()) return profile.status();
    const std::string out = options.profile_out.empty() ? folder : options.profile_out;
    if (absl::Status st = SaveProfileFolder(*profile, out); !st.ok()) {
      spdlog::warn("could not save the profile: {}", std::string(st.message()));
    } else {
      spdlog::info("profile written to {}/{}", out, kSampleProfileFile);
    }
  }

  // The probe gives the link rate and what receiving costs this node's CPUs.
  Resources resources;
  NetProbeOptions probe_options;
  probe_options.seed = loader_options.seed;
  absl::StatusOr<NetProbeResult> probe = ProbeBandwidth(client, probe_options);
  if (!probe.ok()) return probe.status();
  const double probe_bytes = std::max(1.0, static_cast<double>(probe->bytes));
  resources.local_seconds_per_wire_byte = probe->client_cpu_seconds / probe_bytes;
  const double wall_scale = StorageWallScale(manifest);
  resources.remote_seconds_per_raw_byte = probe->server_read_seconds * wall_scale / probe_bytes;
  resources.remote_seconds_per_wire_byte =
      std::max(0.0, probe->server_send_cpu_seconds) / probe_bytes;
  spdlog::info(
      "smartoff: measured {:.1f} Mbit/s from {} ({} samples, {:.1f} MB in {:.2f}s); per byte, "
      "receiving costs this node {:.2f} ns of CPU, the storage node {:.2f} ns to read and {:.2f} "
      "ns to send{}",
      probe->bytes_per_second * 8 / 1e6, client->address(), probe->samples, probe->bytes / 1e6,
      probe->seconds, resources.local_seconds_per_wire_byte * 1e9,
      resources.remote_seconds_per_raw_byte * 1e9, resources.remote_seconds_per_wire_byte * 1e9,
      probe->server_send_cpu_seconds < 0 ? " (not reported by the server)" : "");
  resources.net_bytes_per_s = options.net_bw_mbit > 0 ? MbitToBytesPerSecond(options.net_bw_mbit)
                                                      : probe->bytes_per_second;
  // The storage node's CPUs: its prep workers, or its CPU quota when smaller.
  const double prep_workers = static_cast<double>(manifest.prep_workers());
  const double cpu_limit = manifest.cpu_limit() > 0 ? manifest.cpu_limit() : prep_workers;
  resources.remote_cpus =
      options.remote_cpus > 0 ? options.remote_cpus : std::min(prep_workers, cpu_limit);
  if (cpu_limit < prep_workers) {
    spdlog::info("smartoff: the storage node may use {:.2f} CPUs for its {} prep workers",
                 cpu_limit, manifest.prep_workers());
  }
  resources.remote_speed = profile->server_speed_factor;
  resources.local_cpus = loader_options.workers;
  resources.gpu_seconds_per_batch = std::max(0.0, options.gpu_batch_seconds);
  resources.batch_size = loader_options.batch_size;
  if (absl::Status st = resources.Validate(); !st.ok()) return st;
  return std::make_unique<SmartoffPlanner>(*std::move(profile), resources, options, wall_scale);
}

}  // namespace sophon
