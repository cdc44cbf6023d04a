#include "client/offload/rate_estimate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sophon {

double StorageShare(double planned_seconds, double reported_seconds, double seconds,
                    double cpus) {
  if (!(seconds > 0)) return 0;
  const double reported = cpus > 0 ? reported_seconds / (seconds * cpus) : 0;
  return std::max(planned_seconds / seconds, reported);
}

double AvailableShare(double whole, double others, int competitors) {
  if (!(whole > 0)) return whole;
  const double fair = competitors > 1 ? whole / competitors : whole;
  return std::clamp(whole - std::max(0.0, others), fair, whole);
}

void SharedFirstPlan(int world_size, int local_world_size, double node_cpus,
                     Resources* resources) {
  if (world_size > 1) resources->remote_cpus /= world_size;
  if (local_world_size > 1) {
    resources->net_bytes_per_s /= local_world_size;
    if (node_cpus > 0) {
      resources->local_cpus = std::min(resources->local_cpus, node_cpus / local_world_size);
    }
  }
}

double WholeLinkRate(double probe_bytes_per_s, double probe_bytes, double others_bytes,
                     int local_world_size) {
  if (!(probe_bytes > 0) || local_world_size <= 1) return probe_bytes_per_s;
  const double others = std::clamp(others_bytes, 0.0, (local_world_size - 1) * probe_bytes);
  return probe_bytes_per_s * (probe_bytes + others) / probe_bytes;
}

EpochShares MeasureShares(const EpochRecord& epoch, const Resources& assumed) {
  EpochShares shares;
  const double t = epoch.seconds;
  if (!(t > 0)) return shares;
  if (assumed.net_bytes_per_s > 0) {
    shares.link = static_cast<double>(epoch.wire_bytes) / (t * assumed.net_bytes_per_s);
  }
  const double whole =
      epoch.storage_whole_cpus > 0 ? epoch.storage_whole_cpus : assumed.remote_cpus;
  const double others = std::max(0.0, epoch.storage_others_seconds);
  if (others == 0 && whole == assumed.remote_cpus) {
    shares.storage =
        StorageShare(epoch.plan.remote_s, epoch.storage_seconds, t, assumed.remote_cpus);
  } else {
    // The whole server's busy share: this rank's planned or reported seconds
    // on its part of the CPUs, and the others' on the rest.
    const double planned = whole > 0 && std::isfinite(epoch.plan.remote_s)
                               ? (epoch.plan.remote_s * assumed.remote_cpus + others) / whole
                               : epoch.plan.remote_s;
    shares.storage = StorageShare(planned, epoch.storage_seconds + others, t, whole);
  }
  shares.step = std::max(0.0, 1 - epoch.wait_seconds / t);
  return shares;
}

std::optional<double> StorageSpeed(double reported_seconds, double profiled_seconds) {
  if (!(profiled_seconds > kMinWorkSeconds)) return std::nullopt;
  return reported_seconds / profiled_seconds;
}

std::optional<double> LinkBandwidth(double bytes_per_s, double assumed_bytes_per_s,
                                    bool planned_binding, double storage_share, double drift) {
  if (!(bytes_per_s > 0)) return std::nullopt;
  if (bytes_per_s > (1 + drift) * assumed_bytes_per_s) return bytes_per_s;  // a bound
  const bool binding = planned_binding && storage_share < kSaturatedShare;
  if (binding && bytes_per_s < (1 - drift) * assumed_bytes_per_s) return bytes_per_s;
  return std::nullopt;
}

const char* LocalSpeedEstimate::EvidenceName(Evidence evidence) {
  switch (evidence) {
    case Evidence::kTooLittle: return "too_little";
    case Evidence::kWithinDeadband: return "within_deadband";
    case Evidence::kBound: return "bound";
    case Evidence::kIdentified: return "identified";
    case Evidence::kNotIdentified: return "not_identified";
    case Evidence::kRefuted: return "refuted";
  }
  return "unknown";
}

LocalSpeedEstimate::Update LocalSpeedEstimate::Observe(const EpochRecord& epoch,
                                                       const Resources& assumed) {
  Update out;
  const double old = assumed.local_speed;
  const double t = epoch.seconds;
  const double local_s = epoch.plan.local_s;
  out.speed = old;
  out.shares = MeasureShares(epoch, assumed);
  if (!(t >= kMinLocalEpochSeconds) || !(local_s > kMinWorkSeconds) || !(old > 0)) {
    out.evidence = Evidence::kTooLittle;
    out.reason = absl::StrFormat(
        "the epoch ran %.2fs with %.2fs planned here: too little to tell (at least %.2fs and "
        "%.2fs)", t, local_s, kMinLocalEpochSeconds, kMinWorkSeconds);
    return out;
  }
  const double work = local_s / old;  // the work planned here, in seconds at speed 1
  const double raised_after = raised_after_s_;
  const double raised_work = raised_work_s_;
  raised_after_s_ = 0;
  raised_work_s_ = 0;
  const double ratio = t / local_s;
  const std::string ran = absl::StrFormat(
      "it ran %.2fs where its CPUs' share was planned %.2fs; the link was %.0f%% and the storage "
      "node %.0f%% busy, the step %.0f%% (the loop waited the rest for data)",
      t, local_s, 100 * out.shares.link, 100 * out.shares.storage, 100 * out.shares.step);
  if (std::abs(ratio - 1) < kLocalSpeedDeadband) {
    out.evidence = Evidence::kWithinDeadband;
    out.reason = absl::StrCat(ran, ": within the deadband");
    return out;
  }
  if (ratio < 1) {
    // A bound: this node did its planned work within the epoch.
    out.evidence = Evidence::kBound;
    out.speed = std::clamp(old * std::max(ratio, 1 / kMaxLocalSpeedStep), kMinLocalSpeed,
                           kMaxLocalSpeed);
    out.reason = absl::StrCat(ran, ": it did its work sooner, so it is faster");
    return out;
  }
  if (raised_after > 0 && t >= (1 - kLocalSpeedDeadband) * raised_after &&
      work <= (1 - kRefutingWorkDrop) * raised_work) {
    out.evidence = Evidence::kRefuted;
    out.speed = speed_before_rise_;
    elimination_refuted_ = true;
    out.reason = absl::StrFormat(
        "%s: after the rise from %.2f it took %.2fs against %.2fs with %.0f%% of the work planned "
        "here, so this node did not bind the epoch that raised it; the rise is undone, and no "
        "rise is identified by elimination again in this job",
        ran, speed_before_rise_, t, raised_after, 100 * work / raised_work);
    return out;
  }
  if (elimination_refuted_) {
    out.evidence = Evidence::kNotIdentified;
    out.reason = absl::StrCat(ran, ": not identified (an earlier epoch showed a bound the "
                                   "model does not observe)");
    return out;
  }
  std::string saturated;
  for (const auto& [name, share] : {std::pair<const char*, double>{"link", out.shares.link},
                                    {"storage node", out.shares.storage},
                                    {"step", out.shares.step}}) {
    if (share >= kSaturatedShare) absl::StrAppend(&saturated, saturated.empty() ? "" : ", ", name);
  }
  if (!saturated.empty()) {
    out.evidence = Evidence::kNotIdentified;
    out.reason = absl::StrCat(ran, ": not identified (saturated: ", saturated, ")");
    return out;
  }
  out.evidence = Evidence::kIdentified;
  out.speed = std::clamp(old * std::min(ratio, kMaxLocalSpeedStep), kMinLocalSpeed,
                         kMaxLocalSpeed);
  out.reason = absl::StrCat(ran, ": nothing else saturated, this node bound the epoch");
  if (out.speed > old) {
    raised_after_s_ = t;
    raised_work_s_ = work;
    speed_before_rise_ = old;
  }
  return out;
}

}  // namespace sophon
