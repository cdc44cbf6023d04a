#include "client/offload/cluster_policy.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/offload/net_probe.h"
#include "client/offload/profile_pass.h"
#include "client/offload/rate_estimate.h"
#include "sophon/base/cpu_limit.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// The holders of each sample of `order`: its shard's servers.
SampleHolders HoldersOf(const GlobalManifest& manifest, absl::Span<const uint64_t> order) {
  SampleHolders holders;
  for (const Shard& shard : manifest.shards()) holders.holders.push_back(shard.servers);
  holders.group_of.reserve(order.size());
  for (uint64_t id : order) holders.group_of.push_back(manifest.ShardOf(id));
  return holders;
}

}  // namespace

ClusterSmartoffPolicy::ClusterSmartoffPolicy(DatasetProfile profile, ClusterResources cluster,
                                             const GlobalManifest* manifest,
                                             const SmartoffOptions& options,
                                             std::vector<double> wall_scales)
    : profile_(std::move(profile)), manifest_(manifest), options_(options) {
  // Every server's share of the samples over a whole epoch of the dataset
  // (an epoch of one rank has about the same shares).
  const std::vector<uint64_t> all = AllSampleIds(profile_);
  const int n = static_cast<int>(cluster.servers.size());
  shares_.assign(n, 1.0 / n);
  absl::StatusOr<ClusterPlanResult> plan =
      MakeClusterPlan(options_.planner, profile_, cluster, all, HoldersOf(*manifest_, all));
  if (plan.ok() && !all.empty()) {
    for (int s = 0; s < n; ++s) {
      shares_[s] = std::max<double>(1e-6, static_cast<double>(plan->cost.servers[s].samples) /
                                              static_cast<double>(all.size()));
    }
  }
  // Each server's policy sees its share of the epoch and its own link and
  // storage node: not enough to judge the training node's speed by.
  SmartoffOptions server_options = options_;
  server_options.measure_local_speed = false;
  for (int s = 0; s < n; ++s) {
    servers_.push_back(std::make_unique<SmartoffPolicy>(
        profile_, ShareOf(cluster, s, shares_[s]), server_options,
        s < static_cast<int>(wall_scales.size()) ? wall_scales[s] : 1.0));
  }
  absl::MutexLock lock(&mu_);
  cluster_ = std::move(cluster);
}

absl::Status ClusterSmartoffPolicy::BeginEpoch(uint64_t epoch, absl::Span<const uint64_t> order) {
  ClusterResources cluster;
  {
    absl::MutexLock lock(&mu_);
    // What each server's policy measured since: its storage speed, and its
    // link when it re-planned for it.
    for (size_t s = 0; s < servers_.size(); ++s) {
      const Resources r = servers_[s]->resources();
      cluster_.servers[s].remote_speed = r.remote_speed;
      const Resources given = ShareOf(cluster_, static_cast<int>(s), shares_[s]);
      if (r.net_bytes_per_s != given.net_bytes_per_s) {
        cluster_.servers[s].net_bytes_per_s = r.net_bytes_per_s;
      }
      if (s == 0) cluster_.gpu_seconds_per_batch = r.gpu_seconds_per_batch * shares_[0];
    }
    cluster = cluster_;
  }
  absl::StatusOr<ClusterPlanResult> assignment =
      MakeClusterPlan(options_.planner, profile_, cluster, order, HoldersOf(*manifest_, order));
  std::vector<int> server_of(order.size(), SampleAssignment::kAnyServer);
  if (assignment.ok()) {
    server_of = assignment->servers;
  } else {
    spdlog::error("smartoff: planning {} over {} servers failed ({}); any replica serves",
                  EpochName(epoch), servers_.size(), std::string(assignment.status().message()));
    for (size_t i = 0; i < order.size(); ++i) {
      server_of[i] = manifest_->shards()[manifest_->ShardOf(order[i])].servers[0];
    }
  }
  // Each server's own order, planned by its own policy.
  const int n = static_cast<int>(servers_.size());
  std::vector<std::vector<uint64_t>> orders(n);
  std::vector<int64_t> index_of(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    index_of[i] = static_cast<int64_t>(orders[server_of[i]].size());
    orders[server_of[i]].push_back(order[i]);
  }
  for (int s = 0; s < n; ++s) {
    if (absl::Status st = servers_[s]->BeginEpoch(epoch, orders[s]); !st.ok()) return st;
  }
  // The joint prediction of what the servers' policies planned.
  std::vector<Stage> stages(order.size(), kFirstStage);
  for (int s = 0; s < n; ++s) {
    const PlanResult plan = servers_[s]->last_plan();
    if (plan.stages.size() != orders[s].size()) continue;  // its planning failed: RAW
    for (size_t i = 0; i < order.size(); ++i) {
      if (server_of[i] == s) stages[i] = plan.stages[index_of[i]];
    }
  }
  ClusterPlanResult joint;
  joint.kind = options_.planner;
  joint.stages = stages;
  joint.servers = server_of;
  absl::StatusOr<ClusterPlanCost> cost =
      EvaluateClusterPlan(profile_, cluster, order, stages, server_of);
  if (cost.ok()) {
    joint.cost = *cost;
    joint.lower_bound_s = assignment.ok() ? assignment->lower_bound_s : 0;
    spdlog::info("smartoff {} over {} servers: {}", EpochName(epoch), n, DescribeClusterPlan(joint));
  }
  absl::MutexLock lock(&mu_);
  server_of_ = std::move(server_of);
  index_of_ = std::move(index_of);
  last_plan_ = std::move(joint);
  return absl::OkStatus();
}

void ClusterSmartoffPolicy::Plan(int64_t first_position, absl::Span<const uint64_t> ids,
                                 absl::Span<SampleAssignment> out) {
  std::vector<int> server(ids.size(), -1);
  std::vector<int64_t> index(ids.size(), 0);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t p = first_position + static_cast<int64_t>(i);
      if (p < static_cast<int64_t>(server_of_.size())) {
        server[i] = server_of_[p];
        index[i] = index_of_[p];
      }
    }
  }
  // Each server's policy sees its own positions, in increasing order.
  for (size_t i = 0; i < ids.size(); ++i) {
    if (server[i] < 0) {
      out[i] = SampleAssignment{kFirstStage, SampleAssignment::kAnyServer};
      continue;
    }
    servers_[server[i]]->Plan(index[i], ids.subspan(i, 1), out.subspan(i, 1));
    out[i].server = server[i];
  }
}

void ClusterSmartoffPolicy::OnSample(const SampleObservation& observation) {
  if (observation.server < 0 || observation.server >= static_cast<int>(servers_.size())) return;
  servers_[observation.server]->OnSample(observation);
}

void ClusterSmartoffPolicy::OnStep(double step_seconds) {
  // Each server's policy plans with the GPU time of its share (g / share):
  // it sees the step scaled the same way.
  for (size_t s = 0; s < servers_.size(); ++s) {
    servers_[s]->OnStep(step_seconds / shares_[s]);
  }
}

double ClusterSmartoffPolicy::PredictedEpochSeconds() const {
  absl::MutexLock lock(&mu_);
  return last_plan_.cost.epoch_s;
}

ClusterPlanResult ClusterSmartoffPolicy::last_plan() const {
  absl::MutexLock lock(&mu_);
  return last_plan_;
}

absl::StatusOr<std::unique_ptr<ClusterSmartoffPolicy>> CreateClusterSmartoffPolicy(
    ServerSet* servers, const LoaderOptions& loader_options, const SmartoffOptions& options,
    double ingress_mbit) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  const GlobalManifest& manifest = servers->manifest();
  // Shard by shard, through each shard's first server, into global ids.
  std::vector<double> shard_speed(manifest.shards().size(), 0);
  absl::StatusOr<DatasetProfile> profile = LoadOrMakeProfile(
      manifest.name(), manifest.fingerprint(), manifest.num_samples(), loader_options, options,
      [&]() -> absl::StatusOr<DatasetProfile> {
        DatasetProfile global;
        global.dataset = manifest.name();
        global.fingerprint = manifest.fingerprint();
        global.crop_size = loader_options.pipeline.augment.crop_size;
        double weighted_speed = 0;
        for (size_t k = 0; k < manifest.shards().size(); ++k) {
          const Shard& shard = manifest.shards()[k];
          absl::StatusOr<DatasetProfile> part = ProfileOverNetwork(
              servers->client(shard.servers[0]), loader_options, options.speed_probe_samples);
          if (!part.ok()) return part.status();
          shard_speed[k] = part->server_speed_factor;
          weighted_speed += part->server_speed_factor * static_cast<double>(shard.size);
          global.times_source = part->times_source;
          for (SampleProfile& sample : part->samples) {
            sample.id += shard.base;
            global.samples.push_back(std::move(sample));
          }
        }
        global.server_speed_factor =
            weighted_speed / std::max<double>(1, static_cast<double>(manifest.num_samples()));
        return global;
      });
  if (!profile.ok()) return profile.status();
  ClusterResources cluster;
  std::vector<double> wall_scales;
  std::vector<StorageMeasurement> measured;
  for (int s = 0; s < servers->size(); ++s) {
    absl::StatusOr<StorageMeasurement> m =
        MeasureStorageServer(servers->client(s), loader_options, options);
    if (!m.ok()) return m.status();
    const double speed = shard_speed[manifest.ShardOfServer(s)];
    m->server.remote_speed = speed > 0 ? speed : profile->server_speed_factor;
    cluster.servers.push_back(m->server);
    wall_scales.push_back(m->wall_scale);
    measured.push_back(*std::move(m));
  }
  // Receiving costs this node the same per byte whichever server sent it:
  // the mean over the probes.
  double recv = 0;
  for (const StorageMeasurement& m : measured) recv += m.local_seconds_per_wire_byte;
  cluster.local_seconds_per_wire_byte = recv / static_cast<double>(measured.size());
  if (ingress_mbit > 0) {
    cluster.ingress_bytes_per_s = MbitToBytesPerSecond(ingress_mbit);
  } else if (ingress_mbit < 0) {
    // Every server at once: a shared ingress shows as a sum below the parts.
    std::vector<absl::StatusOr<NetProbeResult>> probes(servers->size());
    std::vector<std::thread> threads;
    NetProbeOptions probe_options;
    probe_options.seed = loader_options.seed + 1;
    for (int s = 0; s < servers->size(); ++s) {
      threads.emplace_back(
          [&, s] { probes[s] = ProbeBandwidth(servers->client(s), probe_options); });
    }
    for (std::thread& t : threads) t.join();
    double together = 0;
    double alone = 0;
    for (int s = 0; s < servers->size(); ++s) {
      if (!probes[s].ok()) return probes[s].status();
      together += probes[s]->bytes_per_second;
      alone += measured[s].probe.bytes_per_second;
    }
    const bool shared = together < 0.85 * alone;
    spdlog::info("smartoff: all {} servers at once carried {:.1f} Mbit/s ({:.1f} alone, summed): "
                 "{}",
                 servers->size(), together * 8 / 1e6, alone * 8 / 1e6,
                 shared ? "the training node's ingress is a shared limit"
                        : "no shared ingress limit");
    if (shared) cluster.ingress_bytes_per_s = together;
  }
  cluster.local_cpus = loader_options.workers;
  // Several ranks: each plans with its part of every server and of this
  // node's ingress and cores, as SharedFirstPlan divides one server's.
  const double node_cpus = ProcessCpuLimit();
  for (ServerResources& server : cluster.servers) {
    Resources part;
    part.remote_cpus = server.remote_cpus;
    part.net_bytes_per_s = server.net_bytes_per_s;
    part.local_cpus = cluster.local_cpus;
    SharedFirstPlan(loader_options.world, options.local_world_size, node_cpus, &part);
    server.remote_cpus = part.remote_cpus;
    server.net_bytes_per_s = part.net_bytes_per_s;
  }
  if (options.local_world_size > 1) {
    cluster.ingress_bytes_per_s /= options.local_world_size;
    cluster.local_cpus =
        std::min(cluster.local_cpus, node_cpus / options.local_world_size);
  }
  cluster.gpu_seconds_per_batch = std::max(0.0, options.FirstPlanStepSeconds());
  cluster.batch_size = loader_options.batch_size;
  if (absl::Status st = cluster.Validate(); !st.ok()) return st;
  return std::make_unique<ClusterSmartoffPolicy>(*std::move(profile), std::move(cluster),
                                                 &manifest, options, std::move(wall_scales));
}

absl::StatusOr<std::unique_ptr<OffloadPolicy>> CreateSmartoffFor(
    ServerSet* servers, const LoaderOptions& loader_options, const SmartoffOptions& options,
    double ingress_mbit) {
  if (servers->size() > 1) {
    absl::StatusOr<std::unique_ptr<ClusterSmartoffPolicy>> created =
        CreateClusterSmartoffPolicy(servers, loader_options, options, ingress_mbit);
    if (!created.ok()) return created.status();
    return std::unique_ptr<OffloadPolicy>(*std::move(created));
  }
  absl::StatusOr<std::unique_ptr<SmartoffPolicy>> created =
      CreateSmartoffPolicy(servers->client(0), loader_options, options);
  if (!created.ok()) return created.status();
  return std::unique_ptr<OffloadPolicy>(*std::move(created));
}

}  // namespace sophon
