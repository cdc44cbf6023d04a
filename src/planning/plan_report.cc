#include "sophon/planning/plan_report.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sophon/base/json.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

std::string Seconds(double s) {
  return std::isfinite(s) ? absl::StrFormat("%.2f", s) : std::string("inf");
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.6g", v) : std::string("null");
}

int64_t Batches(const Resources& r, size_t samples) {
  return (static_cast<int64_t>(samples) + r.batch_size - 1) / r.batch_size;
}

}  // namespace

std::string FormatPlanTable(const DatasetProfile& profile, const Resources& resources,
                            const std::vector<PlanResult>& plans) {
  std::string out;
  absl::StrAppendFormat(&out, "profile    %s: %d samples, S=%d, fingerprint %s\n", profile.dataset,
                        profile.samples.size(), profile.crop_size,
                        profile.fingerprint ? FingerprintHex(profile.fingerprint) : "unknown");
  absl::StrAppendFormat(
      &out, "op times   %s\n",
      profile.times_detail.empty() ? TimesSourceName(profile.times_source) : profile.times_detail);
  absl::StrAppendFormat(
      &out,
      "resources  network %.6g Mbit/s; storage node %.6g CPUs at %.3g s per client s, "
      "%.3g ns/byte read, %.3g ns/byte sent; training node %.6g workers, %.3g ns/byte "
      "received; GPU %.6g s/batch x %d batches of %d\n",
      resources.net_bytes_per_s * 8 / 1e6, resources.remote_cpus, resources.remote_speed,
      resources.remote_seconds_per_raw_byte * 1e9, resources.remote_seconds_per_wire_byte * 1e9,
      resources.local_cpus, resources.local_seconds_per_wire_byte * 1e9,
      resources.gpu_seconds_per_batch,
      Batches(resources, profile.samples.size()), resources.batch_size);
  if (!plans.empty()) {
    absl::StrAppendFormat(&out,
                          "lower bound %s s (LP relaxation over every stage of every sample, "
                          "and the GPU time)\n",
                          Seconds(plans.front().lower_bound_s));
  }
  absl::StrAppendFormat(&out, "\n%-10s %10s %10s %10s %10s %10s %9s %-11s", "planner",
                        "epoch_s", "net_s", "remote_s", "local_s", "gpu_s", "wire_GB",
                        "bottleneck");
  for (Stage stage : AllStages()) absl::StrAppendFormat(&out, " %7s", StageName(stage));
  absl::StrAppendFormat(&out, " %10s\n", "bound_s");
  for (const PlanResult& p : plans) {
    const PlanCost& c = p.cost;
    absl::StrAppendFormat(&out, "%-10s %10s %10s %10s %10s %10s %9.3f %-11s",
                          PlannerKindName(p.kind), Seconds(c.epoch_s), Seconds(c.net_s),
                          Seconds(c.remote_s), Seconds(c.local_s), Seconds(c.gpu_s),
                          static_cast<double>(c.wire_bytes) / 1e9, ResourceName(c.bottleneck));
    for (int64_t n : c.samples_per_stage) absl::StrAppendFormat(&out, " %7d", n);
    absl::StrAppendFormat(&out, " %10s\n", Seconds(p.lower_bound_s));
  }
  return out;
}

std::string FormatClusterPlanTable(const DatasetProfile& profile, const ClusterResources& cluster,
                                   const std::string& layout,
                                   const std::vector<ClusterPlanResult>& plans) {
  std::string out = absl::StrFormat(
      "profile: %s, %d samples, crop %d; %d servers (%s), ingress %s, %.1f local CPUs, GPU "
      "%.3fs/batch of %d\n",
      profile.dataset, profile.samples.size(), profile.crop_size, cluster.servers.size(), layout,
      cluster.ingress_bytes_per_s > 0
          ? absl::StrFormat("%.1f Mbit/s", cluster.ingress_bytes_per_s * 8 / 1e6)
          : std::string("not a limit"),
      cluster.local_cpus, cluster.gpu_seconds_per_batch, cluster.batch_size);
  for (size_t s = 0; s < cluster.servers.size(); ++s) {
    absl::StrAppendFormat(&out, "  server %d: link %.1f Mbit/s, %.1f CPUs, speed %.2f\n", s,
                          cluster.servers[s].net_bytes_per_s * 8 / 1e6,
                          cluster.servers[s].remote_cpus, cluster.servers[s].remote_speed);
  }
  absl::StrAppendFormat(&out, "%-10s %10s %10s  %-16s %s\n", "planner", "epoch_s", "bound_s",
                        "bottleneck", "per server: samples / MB / cpu busy");
  for (const ClusterPlanResult& p : plans) {
    absl::StrAppendFormat(&out, "%-10s %10.3f %10.3f  %-16s", PlannerKindName(p.kind),
                          p.cost.epoch_s, p.lower_bound_s, p.cost.bottleneck);
    for (size_t s = 0; s < p.cost.servers.size(); ++s) {
      const ServerPlanCost& c = p.cost.servers[s];
      absl::StrAppendFormat(&out, " %d/%.1f/%.0f%%", c.samples, c.wire_bytes / 1e6,
                            100 * c.remote_busy);
    }
    out += "\n";
  }
  return out;
}

std::string FormatClusterPlanJson(const DatasetProfile& profile, const ClusterResources& cluster,
                                  const std::string& layout,
                                  const std::vector<ClusterPlanResult>& plans) {
  JsonWriter w;
  w.BeginObject();
  w.Key("dataset").String(profile.dataset);
  w.Key("samples").Uint(profile.samples.size());
  w.Key("layout").String(layout);
  w.Key("ingress_mbit_per_s").Number(cluster.ingress_bytes_per_s * 8 / 1e6);
  w.Key("servers").BeginArray();
  for (const ServerResources& s : cluster.servers) {
    w.BeginObject();
    w.Key("net_mbit_per_s").Number(s.net_bytes_per_s * 8 / 1e6);
    w.Key("remote_cpus").Number(s.remote_cpus);
    w.Key("remote_speed").Number(s.remote_speed);
    w.EndObject();
  }
  w.EndArray();
  w.Key("plans").BeginArray();
  for (const ClusterPlanResult& p : plans) {
    w.BeginObject();
    w.Key("planner").String(PlannerKindName(p.kind));
    w.Key("epoch_s").Number(p.cost.epoch_s);
    w.Key("lower_bound_s").Number(p.lower_bound_s);
    w.Key("bottleneck").String(p.cost.bottleneck);
    w.Key("ingress_s").Number(p.cost.ingress_s);
    w.Key("local_s").Number(p.cost.local_s);
    w.Key("gpu_s").Number(p.cost.gpu_s);
    w.Key("servers").BeginArray();
    for (const ServerPlanCost& c : p.cost.servers) {
      w.BeginObject();
      w.Key("samples").Int(c.samples);
      w.Key("wire_bytes").Uint(c.wire_bytes);
      w.Key("link_s").Number(c.link_s);
      w.Key("remote_s").Number(c.remote_s);
      w.Key("remote_busy").Number(c.remote_busy);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

std::string FormatPlanJson(const DatasetProfile& profile, const Resources& resources,
                           const std::vector<PlanResult>& plans) {
  JsonWriter w;
  w.BeginObject();
  w.Key("profile").BeginObject();
  w.Key("dataset").String(profile.dataset);
  w.Key("samples").Uint(profile.samples.size());
  w.Key("crop_size").Int(profile.crop_size);
  w.Key("fingerprint").String(FingerprintHex(profile.fingerprint));
  w.Key("times").String(TimesSourceName(profile.times_source));
  w.Key("times_detail").String(profile.times_detail);
  w.EndObject();
  w.Key("resources").BeginObject();
  w.Key("net_mbit_per_s").Number(resources.net_bytes_per_s * 8 / 1e6);
  w.Key("remote_cpus").Number(resources.remote_cpus);
  w.Key("remote_speed").Number(resources.remote_speed);
  w.Key("remote_read_ns_per_byte").Number(resources.remote_seconds_per_raw_byte * 1e9);
  w.Key("remote_send_ns_per_byte").Number(resources.remote_seconds_per_wire_byte * 1e9);
  w.Key("local_cpus").Number(resources.local_cpus);
  w.Key("local_recv_ns_per_byte").Number(resources.local_seconds_per_wire_byte * 1e9);
  w.Key("gpu_seconds_per_batch").Number(resources.gpu_seconds_per_batch);
  w.Key("batch_size").Int(resources.batch_size);
  w.EndObject();
  w.Key("plans").BeginArray();
  for (const PlanResult& p : plans) {
    const PlanCost& c = p.cost;
    w.BeginObject();
    w.Key("planner").String(PlannerKindName(p.kind));
    w.Key("epoch_s").Number(c.epoch_s);
    w.Key("net_s").Number(c.net_s);
    w.Key("remote_s").Number(c.remote_s);
    w.Key("local_s").Number(c.local_s);
    w.Key("gpu_s").Number(c.gpu_s);
    w.Key("wire_bytes").Uint(c.wire_bytes);
    w.Key("bottleneck").String(ResourceName(c.bottleneck));
    w.Key("samples_per_stage").BeginObject();
    for (Stage stage : AllStages()) {
      w.Key(StageName(stage)).Int(c.samples_per_stage[StageIndex(stage)]);
    }
    w.EndObject();
    w.Key("lower_bound_s").Number(p.lower_bound_s);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

absl::StatusOr<std::string> SweepCsv(const DatasetProfile& profile, const Resources& base,
                                     const SweepOptions& options) {
  std::string out =
      "net_mbit,remote_cpus,planner,epoch_s,net_s,remote_s,local_s,gpu_s,wire_bytes,bottleneck";
  for (Stage stage : AllStages()) absl::StrAppend(&out, ",", StageName(stage));
  out += ",lower_bound_s\n";
  const std::vector<uint64_t> ids = AllSampleIds(profile);
  for (double mbit : options.net_mbit) {
    for (double cpus : options.remote_cpus) {
      Resources r = base;
      r.net_bytes_per_s = MbitToBytesPerSecond(mbit);
      r.remote_cpus = cpus;
      ASSIGN_OR_RETURN(const std::vector<PlanResult> plans, MakeAllPlans(profile, r, ids));
      for (const PlanResult& p : plans) {
        const PlanCost& c = p.cost;
        absl::StrAppendFormat(&out, "%g,%g,%s,%s,%s,%s,%s,%s,%d,%s", mbit, cpus,
                              PlannerKindName(p.kind), JsonNumber(c.epoch_s), JsonNumber(c.net_s),
                              JsonNumber(c.remote_s), JsonNumber(c.local_s), JsonNumber(c.gpu_s),
                              c.wire_bytes, ResourceName(c.bottleneck));
        for (int64_t n : c.samples_per_stage) absl::StrAppend(&out, ",", n);
        absl::StrAppend(&out, ",", JsonNumber(p.lower_bound_s), "\n");
      }
    }
  }
  return out;
}

}  // namespace sophon
