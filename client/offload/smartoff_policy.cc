#include "client/offload/smartoff_policy.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/offload/net_probe.h"
#include "client/offload/profile_pass.h"
#include "client/offload/rate_estimate.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/base/cpu_limit.h"
#include "sophon/base/file_lock.h"
#include "sophon/data/cached_source.h"
#include "sophon/net/credentials.h"
#include "sophon/planning/cost_model.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

std::string DescribePlan(const PlanResult& plan) {
  const PlanCost& c = plan.cost;
  std::string out = absl::StrFormat(
      "predicted %.2fs (network %.2fs, storage CPU %.2fs, local CPU %.2fs, GPU %.2fs; "
      "bottleneck %s; lower bound %.2fs), %.1f MB on the wire, stages",
      c.epoch_s, c.net_s, c.remote_s, c.local_s, c.gpu_s, ResourceName(c.bottleneck),
      plan.lower_bound_s, c.wire_bytes / 1e6);
  for (Stage stage : AllStages()) {
    absl::StrAppend(&out, " ", StageName(stage), "=", c.samples_per_stage[StageIndex(stage)]);
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

const char* ReplanReasonName(ReplanReason reason) {
  switch (reason) {
    case ReplanReason::kStepTime: return "step_time";
    case ReplanReason::kStorageSpeed: return "storage_speed";
    case ReplanReason::kNetwork: return "network";
  }
  return "unknown";
}

namespace {

// The profile with its stages narrowed to those the options allow, and the
// lossless crops' sizes and decode times an epoch of fresh crops can expect
// (UseExpectedJpegCrops: the profiled epoch's own crops would favour the
// samples whose crops happened to come out small).
DatasetProfile PlanningView(DatasetProfile profile, StageSet allowed) {
  profile.stages = profile.stages.Intersect(allowed);
  UseExpectedJpegCrops(&profile);
  return profile;
}

// The crop model of the profile as measured, when the job's crops are known.
std::optional<EpochCropModel> FitCrops(const DatasetProfile& profile,
                                       const SmartoffOptions& options) {
  if (!options.crops.has_value()) return std::nullopt;
  std::optional<EpochCropModel> model = EpochCropModel::Fit(profile);
  if (model.has_value()) {
    spdlog::info("smartoff: each epoch planned at the crop boxes it draws ({} samples whose "
                 "image size the profile holds)", model->samples());
  } else if (profile.stages.Has(Stage::kJpegCrop)) {
    spdlog::info("smartoff: every epoch planned at the average crop (the profile holds too few "
                 "images' sizes; a profile made by this version has them)");
  }
  return model;
}

}  // namespace

absl::Status SmartoffOptions::Validate() const {
  // Every figure must be a finite number: an infinite bandwidth or step
  // time would make every plan's cost infinite or zero.
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"net_bw_mbit", net_bw_mbit},
        {"remote_cpus", remote_cpus},
        {"replan_threshold", replan_threshold},
        {"gpu_batch_seconds", gpu_batch_seconds},
        {"measured_gpu_batch_seconds", measured_gpu_batch_seconds}}) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SmartoffOptions.", name, " must be a finite number, got ", value));
    }
  }
  if (!(net_bw_mbit >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SmartoffOptions.net_bw_mbit must be >= 0 (0 = measure), got ", net_bw_mbit));
  }
  if (!(remote_cpus >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SmartoffOptions.remote_cpus must be >= 0, got ", remote_cpus));
  }
  if (!(replan_threshold > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SmartoffOptions.replan_threshold must be > 0, got ", replan_threshold));
  }
  if (replan_min_samples < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SmartoffOptions.replan_min_samples must be >= 1, got ", replan_min_samples));
  }
  if (!(measured_gpu_batch_seconds >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SmartoffOptions.measured_gpu_batch_seconds must be >= 0, got ",
        measured_gpu_batch_seconds));
  }
  if (local_world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SmartoffOptions.local_world_size must be >= 1, got ", local_world_size));
  }
  if (speed_probe_samples < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SmartoffOptions.speed_probe_samples must be >= 1, got ", speed_probe_samples));
  }
  if (!stages.Has(kFirstStage)) {
    return absl::InvalidArgumentError(absl::StrCat("SmartoffOptions.stages (",
                                                   StageSetNames(stages), ") must include ",
                                                   StageName(kFirstStage)));
  }
  return absl::OkStatus();
}

SmartoffPolicy::SmartoffPolicy(DatasetProfile profile, Resources resources,
                               const SmartoffOptions& options, double storage_wall_scale,
                               Clock clock)
    : crop_model_(FitCrops(profile, options)),
      profile_(PlanningView(std::move(profile), options.stages)),
      options_(options),
      measure_gpu_(options.gpu_batch_seconds < 0),
      storage_wall_scale_(storage_wall_scale),
      clock_(std::move(clock)),
      resources_(resources),
      cached_(profile_.samples.size(), 0) {}

absl::Status SmartoffPolicy::BeginEpoch(uint64_t epoch, absl::Span<const uint64_t> order) {
  // The server's counters, asked without the lock.
  std::optional<ServerLoad> load;
  if (options_.server_load) {
    absl::StatusOr<ServerLoad> asked = options_.server_load();
    if (asked.ok()) {
      load = *asked;
    } else {
      spdlog::debug("smartoff: the storage server's counters: {}",
                    std::string(asked.status().message()));
    }
  }
  Resources r;
  {
    absl::MutexLock lock(&mu_);
    const std::optional<OthersUse> others = MeasureOthersLocked(load);
    UpdateLocalSpeedLocked(others.has_value() ? others->seconds : 0,
                           others.has_value() ? others->whole_cpus : 0);
    // The storage speed measured over the previous epoch (or warm-up), when it
    // offloaded enough work to tell.
    if (const std::optional<double> speed =
            StorageSpeed(epoch_server_actual_s_, epoch_server_predicted_s_)) {
      spdlog::info("smartoff: storage node speed {:.2f} over the last epoch (assumed {:.2f})",
                   *speed, resources_.remote_speed);
      resources_.remote_speed = *speed;
    }
    epoch_server_actual_s_ = 0;
    epoch_server_predicted_s_ = 0;
    r = resources_;
  }
  DatasetProfile scratch;
  double crop_part = 0;
  const DatasetProfile& planning = PlanningProfile(epoch, &scratch, &crop_part);
  if (crop_part > 0) {
    spdlog::info("smartoff: {}'s crop boxes keep {:.1f}% of their images on average",
                 EpochName(epoch), 100 * crop_part);
  }
  if (const uint64_t cached = cached_samples(); cached > 0) {
    spdlog::info("smartoff: {} samples came from the storage nodes' sample cache last time: "
                 "planned without a read", cached);
  }
  const bool fill = epoch == kWarmupEpoch || options_.last_epoch < 0 ||
                    static_cast<int64_t>(epoch) < options_.last_epoch ||
                    options_.cache_outlives_job;
  if (!fill && options_.cache_room_bytes && options_.cache_room_bytes() > 0) {
    spdlog::info("smartoff: {} is the job's last: this node's sample cache is not filled (it "
                 "would save nothing later)", EpochName(epoch));
  }
  absl::StatusOr<PlanResult> plan = MakePlan(options_.planner, planning, r, order);
  if (plan.ok() && fill) PlanCacheFill(planning, r, order, &*plan);
  std::vector<Stage> stages;
  if (plan.ok()) {
    spdlog::info("smartoff {} plan ({}): {}", EpochName(epoch), PlannerKindName(options_.planner),
                 DescribePlan(*plan));
    stages = plan->stages;
  } else {
    spdlog::error("smartoff: planning {} failed ({}); sending every sample {}", EpochName(epoch),
                  std::string(plan.status().message()), StageName(kFirstStage));
    stages.assign(order.size(), kFirstStage);
  }
  // The epoch's own crop times judge the storage node's speed (OnSample).
  std::shared_ptr<const DatasetProfile> epoch_profile;
  if (&planning == &scratch && crop_model_.has_value() && options_.crops.has_value()) {
    epoch_profile = std::make_shared<const DatasetProfile>(std::move(scratch));
  }
  absl::MutexLock lock(&mu_);
  epoch_ = epoch;
  epoch_profile_ = std::move(epoch_profile);
  order_.assign(order.begin(), order.end());
  plan_ = std::move(stages);
  planned_ = 0;
  fill_cache_ = fill;
  epoch_start_ = clock_();
  epoch_steps_ = 0;
  epoch_planned_ = plan.ok();
  epoch_replanned_ = false;
  // Its full batches: an epoch that drops its last, partial one has run to
  // its end after them.
  epoch_batches_ = r.batch_size > 0 ? static_cast<int64_t>(order.size()) / r.batch_size : 0;
  epoch_wire_bytes_ = 0;
  epoch_wait_s_ = 0;
  last_step_end_ = absl::InfinitePast();
  epoch_remote_cpus_ = r.remote_cpus;
  if (plan.ok()) {
    last_plan_ = *plan;
    epoch_plan_cost_ = plan->cost;
    epoch_prediction_s_ = plan->cost.epoch_s;
  }
  ResetWindowLocked();
  return absl::OkStatus();
}

std::optional<SmartoffPolicy::OthersUse> SmartoffPolicy::MeasureOthersLocked(
    const std::optional<ServerLoad>& load) {
  const absl::Time now = clock_();
  const std::optional<ServerLoad> last = std::exchange(last_load_, load);
  const absl::Time since = std::exchange(last_load_time_, now);
  const double own_wall = std::exchange(own_wall_s_, 0.0);
  const double own_cpu = std::exchange(own_cpu_s_, 0.0);
  const double own_read = std::exchange(own_read_s_, 0.0);
  if (!load.has_value() || !last.has_value() || !(load->whole_cpus > 0)) return std::nullopt;
  const double interval = absl::ToDoubleSeconds(now - since);
  const double wall = load->sample_wall_seconds - last->sample_wall_seconds;
  // A server that does not count its samples' seconds (before
  // ServerStats.sample_wall_seconds), or one that restarted: not measured.
  if (!(interval > 0) || !(wall > 0) || wall + 1e-6 < own_wall) return std::nullopt;
  OthersUse out;
  out.whole_cpus = load->whole_cpus;
  out.seconds = ServerOpSeconds(
      std::max(0.0, wall - own_wall),
      std::max(0.0, load->sample_cpu_seconds - last->sample_cpu_seconds - own_cpu),
      std::max(0.0, load->sample_read_seconds - last->sample_read_seconds - own_read),
      storage_wall_scale_);
  const double old = resources_.remote_cpus;
  resources_.remote_cpus =
      AvailableShare(load->whole_cpus, out.seconds / interval, load->competitors);
  if (resources_.remote_cpus != old) {
    spdlog::info("smartoff: the storage node's other clients used {:.2f} of its {:.2f} CPUs over "
                 "the last {:.2f}s ({} clients share it): this rank plans with {:.2f} (was {:.2f})",
                 out.seconds / interval, load->whole_cpus, interval, load->competitors,
                 resources_.remote_cpus, old);
  }
  return out;
}

void SmartoffPolicy::UpdateLocalSpeedLocked(double others_s, double whole_cpus) {
  if (!options_.measure_local_speed || !epoch_planned_ || epoch_replanned_ ||
      epoch_batches_ == 0 || epoch_steps_ < epoch_batches_) {
    return;  // not measured here, no epoch yet, a re-planned one, or one not run to its end
  }
  EpochRecord epoch;
  epoch.plan = epoch_plan_cost_;
  epoch.seconds = absl::ToDoubleSeconds(last_step_end_ - epoch_start_);
  epoch.wire_bytes = epoch_wire_bytes_;
  epoch.storage_seconds = epoch_server_actual_s_;
  epoch.wait_seconds = epoch_wait_s_;
  epoch.storage_others_seconds = others_s;
  epoch.storage_whole_cpus = whole_cpus;
  const double old = resources_.local_speed;
  // Judged against the plan's rates: the storage node's part as it was
  // planned (MeasureOthersLocked has already set the next one's).
  Resources planned = resources_;
  planned.remote_cpus = epoch_remote_cpus_;
  const LocalSpeedEstimate::Update update = local_speed_.Observe(epoch, planned);
  if (update.speed == old) {
    spdlog::debug("smartoff: training node speed {:.2f} kept ({}): {}", old,
                  LocalSpeedEstimate::EvidenceName(update.evidence), update.reason);
    return;
  }
  spdlog::info("smartoff: training node speed {:.2f} over the last epoch (assumed {:.2f}; {}): {}",
               update.speed, old, LocalSpeedEstimate::EvidenceName(update.evidence),
               update.reason);
  resources_.local_speed = update.speed;
}

void SmartoffPolicy::Plan(int64_t first_position, absl::Span<const uint64_t> ids,
                          absl::Span<SampleAssignment> out) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t p = first_position + static_cast<int64_t>(i);
    const bool known = p < static_cast<int64_t>(plan_.size()) && order_[p] == ids[i];
    out[i] = SampleAssignment{known ? plan_[p] : kFirstStage, SampleAssignment::kAnyServer};
  }
  planned_ = std::max<int64_t>(planned_, first_position + static_cast<int64_t>(ids.size()));
}

void SmartoffPolicy::ResetWindowLocked() {
  observed_ = 0;
  server_actual_s_ = 0;
  server_predicted_s_ = 0;
  window_bytes_ = 0;
  window_start_ = absl::InfiniteFuture();
}

const DatasetProfile& SmartoffPolicy::PlanningProfile(uint64_t epoch, DatasetProfile* scratch,
                                                      double* crop_part) const {
  const bool crops = crop_model_.has_value() && options_.crops.has_value();
  {
    absl::MutexLock lock(&mu_);
    if (cached_count_ == 0 && !options_.held_here && !crops) return profile_;
    *scratch = profile_;
    for (size_t id = 0; id < cached_.size(); ++id) scratch->samples[id].cached = cached_[id] != 0;
  }
  if (crops) {
    const double part =
        crop_model_->Apply(options_.crops->seed, epoch, options_.crops->augment, scratch);
    if (crop_part != nullptr) *crop_part = part;
  }
  // Outside the lock: the predicate takes the cache's own.
  if (options_.held_here) {
    const double per_byte = options_.held_seconds_per_byte ? options_.held_seconds_per_byte() : 0;
    uint64_t held = 0;
    for (SampleProfile& sample : scratch->samples) {
      sample.held_here = options_.held_here(sample.id);
      sample.held_read_seconds =
          sample.held_here ? per_byte * static_cast<double>(sample.bytes[kFirstStage]) : 0;
      held += sample.held_here;
    }
    if (held > 0) spdlog::info("smartoff: {} samples held on this node: RAW crosses no link", held);
  }
  return *scratch;
}

void PlanWithSampleCache(const SampleCache* cache, SmartoffOptions* options) {
  if (cache == nullptr) return;
  options->held_here = [cache](uint64_t id) { return cache->Contains(id); };
  options->held_seconds_per_byte = [cache] { return cache->ReadSecondsPerByte(); };
  options->cache_outlives_job = cache->disk() != nullptr;
  if (cache->options().policy == CachePolicy::kNoEvict || cache->disk() != nullptr) {
    options->cache_room_bytes = [cache] { return cache->RoomBytes(); };
  }
}

void SmartoffPolicy::PlanCacheFill(const DatasetProfile& planning, const Resources& r,
                                   absl::Span<const uint64_t> ids, PlanResult* plan) const {
  if (!options_.cache_room_bytes) return;
  int64_t room = options_.cache_room_bytes();
  if (room <= 0) return;
  const int64_t room_before = room;
  int64_t filled = 0;
  for (size_t i = 0; i < ids.size() && room > 0; ++i) {
    if (ids[i] >= planning.samples.size()) continue;
    const SampleProfile& sample = planning.samples[ids[i]];
    if (sample.held_here) continue;
    const int64_t cost =
        static_cast<int64_t>(sample.bytes[kFirstStage]) + kCacheEntryOverheadBytes;
    if (cost > room) continue;
    room -= cost;  // RAW already or made RAW: it arrives whole and is kept
    if (plan->stages[i] != kFirstStage) {
      plan->stages[i] = kFirstStage;
      ++filled;
    }
  }
  if (filled == 0) return;
  absl::StatusOr<PlanCost> cost = EvaluatePlan(planning, r, ids, plan->stages);
  if (cost.ok()) plan->cost = *cost;
  spdlog::info("smartoff: {} more samples fetched whole to fill this node's sample cache "
               "({:.1f} of {:.1f} MB of room); predicted {:.2f} s",
               filled, (room_before - room) / 1e6, room_before / 1e6, plan->cost.epoch_s);
}

uint64_t SmartoffPolicy::cached_samples() const {
  absl::MutexLock lock(&mu_);
  return cached_count_;
}

void SmartoffPolicy::OnSample(const SampleObservation& obs) {
  if (obs.id >= profile_.samples.size()) return;
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  // The storage node's work as this epoch planned it (its crops' times, when they are planned).
  const DatasetProfile& planned = epoch_profile_ != nullptr ? *epoch_profile_ : profile_;
  const double predicted = planned.samples[obs.id].client.Between(kFirstStage, obs.received);
  epoch_wire_bytes_ += obs.payload_bytes;
  own_wall_s_ += std::max(0.0, obs.server_wall_seconds);
  own_cpu_s_ += std::max(0.0, obs.server_cpu_seconds);
  own_read_s_ += std::max(0.0, obs.server_read_seconds);
  if (obs.ok && obs.cache_hit != (cached_[obs.id] != 0)) {
    cached_[obs.id] = obs.cache_hit ? 1 : 0;
    obs.cache_hit ? ++cached_count_ : --cached_count_;
  }
  if (window_start_ == absl::InfiniteFuture()) {
    window_start_ = now;  // the rate is measured from the first arrival on
    return;
  }
  ++observed_;
  window_bytes_ += obs.payload_bytes;
  if (obs.ok && obs.received != kFirstStage) {
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

void SmartoffPolicy::OnDataWait(double wait_seconds) {
  absl::MutexLock lock(&mu_);
  epoch_wait_s_ += std::max(0.0, wait_seconds);
}

void SmartoffPolicy::OnStep(double step_seconds) {
  {
    absl::MutexLock lock(&mu_);
    step_seconds_.push_back(step_seconds);
    epoch_steps_++;
    last_step_end_ = clock_();
  }
  MaybeReplan();
}

bool SmartoffPolicy::MaybeReplan() {
  const double th = options_.replan_threshold;
  ReplanEvent event;
  std::vector<std::string> details;
  Resources r;
  int64_t from = 0;
  std::vector<uint64_t> rest;
  // The plan so far assumed no training step (none was given or measured
  // before the epoch): the epoch's prediction is made again from this one.
  bool first_step_time = false;
  bool fill = true;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    fill = fill_cache_;
    r = resources_;
    // Step time: the first step is warm-up; decide after three more.
    if (measure_gpu_ && step_seconds_.size() >= 4) {
      const double g =
          Median(std::vector<double>(step_seconds_.begin() + 1, step_seconds_.end()));
      const double old = resources_.gpu_seconds_per_batch;
      if (old == 0 || std::abs(g / old - 1) > th) {
        first_step_time = old == 0;
        r.gpu_seconds_per_batch = g;
        event.reasons.push_back(ReplanReason::kStepTime);
        details.push_back(absl::StrFormat("training step measured %.3fs/batch (assumed %.3fs)",
                                          g, old));
      }
      step_seconds_.erase(step_seconds_.begin() + 1, step_seconds_.end());
    }
    if (observed_ >= options_.replan_min_samples) {
      const double elapsed = absl::ToDoubleSeconds(clock_() - window_start_);
      const double rate = elapsed > 0 ? window_bytes_ / elapsed : 0;
      if (const std::optional<double> speed = StorageSpeed(server_actual_s_, server_predicted_s_);
          speed.has_value() && std::abs(*speed / resources_.remote_speed - 1) > th) {
        r.remote_speed = *speed;
        event.reasons.push_back(ReplanReason::kStorageSpeed);
        details.push_back(absl::StrFormat("storage node speed %.2f (assumed %.2f)", *speed,
                                          resources_.remote_speed));
      }
      // The link's rate: a bound when above the assumed bandwidth, the
      // bandwidth itself when below and the link bound the window (the plan
      // expected it to, and the storage node was not saturated; a window
      // knows only the storage node's reported share). LinkBandwidth.
      const double bw = resources_.net_bytes_per_s;
      if (const std::optional<double> link = LinkBandwidth(
              rate, bw, last_plan_.cost.bottleneck == Resource::kNetwork,
              StorageShare(0, server_actual_s_, elapsed, resources_.remote_cpus), th)) {
        r.net_bytes_per_s = *link;
        event.reasons.push_back(ReplanReason::kNetwork);
        details.push_back(absl::StrFormat("network %.1f Mbit/s (assumed %.1f)", *link * 8 / 1e6,
                                          bw * 8 / 1e6));
      }
      ResetWindowLocked();
    }
    if (event.reasons.empty()) return false;
    resources_ = r;
    from = planned_;
    if (from >= static_cast<int64_t>(order_.size())) return false;
    rest.assign(order_.begin() + from, order_.end());
    epoch = epoch_;
  }
  // Planning runs without the lock: the loader keeps sending meanwhile, and
  // only the positions it has not asked for yet take the new plan.
  DatasetProfile scratch;
  const DatasetProfile& planning = PlanningProfile(epoch, &scratch);
  absl::StatusOr<PlanResult> plan = MakePlan(options_.planner, planning, r, rest);
  if (!plan.ok()) {
    spdlog::error("smartoff: re-planning failed: {}", std::string(plan.status().message()));
    return false;
  }
  if (fill) PlanCacheFill(planning, r, rest, &*plan);
  absl::MutexLock lock(&mu_);
  event.position = from;
  event.detail = absl::StrJoin(details, ", ");
  for (size_t i = 0; i < plan->stages.size(); ++i) {
    const int64_t p = from + static_cast<int64_t>(i);
    if (p < planned_ || p >= static_cast<int64_t>(plan_.size())) continue;
    event.stages_changed += plan_[p] != plan->stages[i];
    plan_[p] = plan->stages[i];
  }
  epoch_replanned_ = true;
  spdlog::info("smartoff re-plan at sample {}/{} ({}): {} stages changed; remaining {}", from,
               order_.size(), event.detail, event.stages_changed, DescribePlan(*plan));
  last_plan_ = *plan;
  if (first_step_time) {
    // What the epoch takes: the time it has run plus what is left, the
    // re-planned positions' cost or, when more, the steps still to run (the
    // batches already requested are not in that plan).
    const double elapsed = std::max(0.0, absl::ToDoubleSeconds(clock_() - epoch_start_));
    const int64_t batches =
        r.batch_size > 0 ? (static_cast<int64_t>(order_.size()) + r.batch_size - 1) / r.batch_size
                         : 0;
    const double steps_left =
        static_cast<double>(std::max<int64_t>(0, batches - epoch_steps_)) * r.gpu_seconds_per_batch;
    epoch_prediction_s_ = elapsed + std::max(plan->cost.epoch_s, steps_left);
    spdlog::info("smartoff: {:.2f}s predicted for this epoch with the training step measured "
                 "({:.2f}s so far, {:.2f}s for the rest; the first plan assumed no step)",
                 epoch_prediction_s_, elapsed, epoch_prediction_s_ - elapsed);
  }
  replans_.push_back(std::move(event));
  return true;
}

Resources SmartoffPolicy::resources() const {
  absl::MutexLock lock(&mu_);
  return resources_;
}

PlanResult SmartoffPolicy::last_plan() const {
  absl::MutexLock lock(&mu_);
  return last_plan_;
}

double SmartoffPolicy::PredictedEpochSeconds() const {
  absl::MutexLock lock(&mu_);
  return epoch_prediction_s_;
}

int SmartoffPolicy::replans() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(replans_.size());
}

std::vector<ReplanEvent> SmartoffPolicy::replan_events() const {
  absl::MutexLock lock(&mu_);
  return replans_;
}

absl::StatusOr<StorageMeasurement> MeasureStorageServer(SampleClient* client,
                                                        const LoaderOptions& loader_options,
                                                        const SmartoffOptions& options) {
  const ServerManifest& manifest = client->manifest();
  StorageMeasurement out;
  // The probe gives the link rate and what receiving costs this node's CPUs.
  NetProbeOptions probe_options;
  probe_options.seed = loader_options.seed;
  // With other ranks on this node, the server's bytes around the probe: what
  // it sent them meanwhile shared the link (WholeLinkRate).
  const bool shared = options.local_world_size > 1;
  absl::StatusOr<v1::ServerStats> before;
  if (shared) before = client->GetStats();
  absl::StatusOr<NetProbeResult> probe = ProbeBandwidth(client, probe_options);
  if (!probe.ok()) return probe.status();
  out.probe = *probe;
  double whole_link = probe->bytes_per_second;
  if (shared && before.ok()) {
    if (absl::StatusOr<v1::ServerStats> after = client->GetStats(); after.ok()) {
      double sent = 0;
      for (int i = 0; i < after->bytes_by_stage_size(); ++i) {
        sent += static_cast<double>(after->bytes_by_stage(i)) -
                (i < before->bytes_by_stage_size() ? static_cast<double>(before->bytes_by_stage(i))
                                                   : 0.0);
      }
      const double probe_bytes = static_cast<double>(probe->bytes);
      whole_link = WholeLinkRate(probe->bytes_per_second, probe_bytes,
                                 std::max(0.0, sent - probe_bytes), options.local_world_size);
      if (whole_link != probe->bytes_per_second) {
        spdlog::info("smartoff: the server sent {:.1f} MB to others during the probe: the link "
                     "carries {:.1f} Mbit/s as a whole",
                     std::max(0.0, sent - probe_bytes) / 1e6, whole_link * 8 / 1e6);
      }
    }
  }
  const double probe_bytes = std::max(1.0, static_cast<double>(probe->bytes));
  out.local_seconds_per_wire_byte = probe->client_cpu_seconds / probe_bytes;
  out.wall_scale = StorageWallScale(manifest);
  {
    const std::string& address = client->address();
    const size_t colon = address.rfind(':');
    out.on_this_node = IsLoopbackHost(colon == std::string::npos ? address : address.substr(0, colon));
  }
  out.server.remote_seconds_per_raw_byte = probe->server_read_seconds * out.wall_scale / probe_bytes;
  out.server.remote_seconds_per_wire_byte =
      std::max(0.0, probe->server_send_cpu_seconds) / probe_bytes;
  spdlog::info(
      "smartoff: measured {:.1f} Mbit/s from {} ({} samples, {:.1f} MB in {:.2f}s); per byte, "
      "receiving costs this node {:.2f} ns of CPU, the storage node {:.2f} ns to read and {:.2f} "
      "ns to send{}",
      probe->bytes_per_second * 8 / 1e6, client->address(), probe->samples, probe->bytes / 1e6,
      probe->seconds, out.local_seconds_per_wire_byte * 1e9,
      out.server.remote_seconds_per_raw_byte * 1e9, out.server.remote_seconds_per_wire_byte * 1e9,
      probe->server_send_cpu_seconds < 0 ? " (not reported by the server)" : "");
  out.server.net_bytes_per_s =
      options.net_bw_mbit > 0 ? MbitToBytesPerSecond(options.net_bw_mbit) : whole_link;
  // The storage node's CPUs: its prep workers, or its CPU quota when smaller.
  const double prep_workers = static_cast<double>(manifest.prep_workers);
  const double cpu_limit = manifest.cpu_limit > 0 ? manifest.cpu_limit : prep_workers;
  out.server.remote_cpus =
      options.remote_cpus > 0 ? options.remote_cpus : std::min(prep_workers, cpu_limit);
  if (cpu_limit < prep_workers) {
    spdlog::info("smartoff: storage node {} may use {:.2f} CPUs for its {} prep workers",
                 client->address(), cpu_limit, manifest.prep_workers);
  }
  return out;
}

absl::StatusOr<DatasetProfile> LoadOrMakeProfile(
    const std::string& dataset_name, uint64_t fingerprint, uint64_t num_samples,
    const LoaderOptions& loader_options, const SmartoffOptions& options,
    const std::function<absl::StatusOr<DatasetProfile>()>& make_profile) {
  const std::string folder = options.profile_folder.empty()
                                 ? DefaultProfileFolder(dataset_name)
                                 : options.profile_folder;
  const int s = loader_options.pipeline.augment.crop_size;
  // One process of the node at a time loads or makes the profile: the ranks
  // of a node profile once, the others wait and load what it wrote.
  std::optional<FileLock> lock;
  {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    absl::StatusOr<FileLock> taken =
        FileLock::Acquire((std::filesystem::path(folder) / ".profile.lock").string(), [&] {
          spdlog::info("smartoff: another process is loading or making the profile in {}; "
                       "waiting for it",
                       folder);
        });
    if (taken.ok()) {
      lock.emplace(*std::move(taken));
    } else {
      spdlog::warn("smartoff: cannot lock the profile folder ({}); profiling without it",
                   std::string(taken.status().message()));
    }
  }
  absl::StatusOr<DatasetProfile> profile = LoadProfileFolder(folder, fingerprint);
  bool need_profile = false;
  if (profile.ok()) {
    if (profile->crop_size != s || profile->samples.size() != num_samples) {
      spdlog::info("profile in {} was taken at crop size {} for {} samples; re-profiling", folder,
                   profile->crop_size, profile->samples.size());
      need_profile = true;
    } else if (loader_options.target >= Stage::kFeatures &&
               !profile->stages.Has(loader_options.target)) {
      spdlog::info("profile in {} does not measure stage {}, this job's last; re-profiling",
                   folder, StageName(loader_options.target));
      need_profile = true;
    } else {
      spdlog::info("smartoff: using the profile in {} ({} samples, server speed factor {:.2f})",
                   folder, profile->samples.size(), profile->server_speed_factor);
    }
  } else if (absl::IsNotFound(profile.status())) {
    spdlog::info("smartoff: no profile for dataset '{}' in {}", dataset_name, folder);
    need_profile = true;
  } else if (absl::IsFailedPrecondition(profile.status())) {
    spdlog::info("smartoff: {}; re-profiling", std::string(profile.status().message()));
    need_profile = true;
  } else {
    return absl::Status(profile.status().code(),
                        absl::StrCat(profile.status().message(),
                                     " (remove it, or set SmartoffOptions.profile_folder to a folder for this dataset)"));
  }
  if (need_profile) {
    profile = make_profile();
    if (!profile.ok()) return profile.status();
    const std::string out = options.profile_out.empty() ? folder : options.profile_out;
    if (absl::Status st = SaveProfileFolder(*profile, out); !st.ok()) {
      spdlog::warn("could not save the profile: {}", std::string(st.message()));
    } else {
      spdlog::info("profile written to {}/{}", out, kSampleProfileFile);
    }
  }
  // The job ends at the loader's target: no plan sends a sample past it.
  profile->target = loader_options.target;
  for (Stage stage : AllStages()) {
    if (stage > loader_options.target) profile->stages.Remove(stage);
  }
  return profile;
}

absl::StatusOr<std::unique_ptr<SmartoffPolicy>> CreateSmartoffPolicy(
    SampleClient* client, const LoaderOptions& loader_options, const SmartoffOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  const ServerManifest& manifest = client->manifest();
  absl::StatusOr<DatasetProfile> profile = LoadOrMakeProfile(
      manifest.dataset_name, manifest.fingerprint, manifest.num_samples(), loader_options,
      options, [&] {
        return ProfileOverNetwork(client, loader_options, options.speed_probe_samples);
      });
  if (!profile.ok()) return profile.status();
  absl::StatusOr<StorageMeasurement> measured = MeasureStorageServer(client, loader_options, options);
  if (!measured.ok()) return measured.status();
  const Resources resources =
      FirstPlanResources(*measured, profile->server_speed_factor, loader_options, options);
  if (absl::Status st = resources.Validate(); !st.ok()) return st;
  SmartoffOptions with_crops = options;
  with_crops.crops = SmartoffOptions::JobCrops{loader_options.seed, loader_options.pipeline.augment};
  if (!with_crops.server_load) {
    // The server's counters each epoch: its CPUs as measured, what its
    // samples cost, its open streams.
    const double whole_cpus = measured->server.remote_cpus;
    const int ranks = loader_options.world;
    with_crops.server_load = [client, whole_cpus, ranks]() -> absl::StatusOr<ServerLoad> {
      absl::StatusOr<v1::ServerStats> stats = client->GetStats();
      if (!stats.ok()) return stats.status();
      ServerLoad load;
      load.sample_wall_seconds = stats->sample_wall_seconds();
      load.sample_cpu_seconds = stats->sample_cpu_seconds();
      load.sample_read_seconds = stats->sample_read_seconds();
      load.competitors = std::max(static_cast<int>(stats->active_streams()), ranks);
      load.whole_cpus = whole_cpus;
      return load;
    };
  }
  return std::make_unique<SmartoffPolicy>(*std::move(profile), resources, with_crops,
                                          measured->wall_scale);
}

Resources FirstPlanResources(const StorageMeasurement& measured, double remote_speed,
                             const LoaderOptions& loader_options, const SmartoffOptions& options) {
  Resources resources;
  resources.net_bytes_per_s = measured.server.net_bytes_per_s;
  resources.remote_cpus = measured.server.remote_cpus;
  resources.remote_seconds_per_raw_byte = measured.server.remote_seconds_per_raw_byte;
  resources.remote_seconds_per_wire_byte = measured.server.remote_seconds_per_wire_byte;
  resources.local_seconds_per_wire_byte = measured.local_seconds_per_wire_byte;
  resources.remote_speed = remote_speed;
  resources.local_cpus = loader_options.workers;
  resources.gpu_seconds_per_batch = std::max(0.0, options.FirstPlanStepSeconds());
  resources.batch_size = loader_options.batch_size;
  // This node's cores; a storage server on this node keeps its prep workers'.
  double node_cpus = ProcessCpuLimit();
  if (measured.on_this_node) node_cpus = std::max(0.01, node_cpus - measured.server.remote_cpus);
  SharedFirstPlan(loader_options.world, options.local_world_size, node_cpus, &resources);
  if (loader_options.world > 1 || options.local_world_size > 1) {
    spdlog::info("smartoff: {} ranks ({} on this node) share the storage node and this node: the "
                 "first plan takes {:.2f} of its {:.2f} CPUs, {:.1f} of {:.1f} Mbit/s and {:.2f} "
                 "prep threads here",
                 loader_options.world, options.local_world_size, resources.remote_cpus,
                 measured.server.remote_cpus, resources.net_bytes_per_s * 8 / 1e6,
                 measured.server.net_bytes_per_s * 8 / 1e6, resources.local_cpus);
  }
  return resources;
}

}  // namespace sophon
