#include "client/job/job.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/offload/cluster_policy.h"
#include "client/offload/fixed_policy.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/base/status_macros.h"
#include "sophon/net/credentials.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// One line per server saying how it is reached; a warning when samples
// would cross a network in plaintext.
void LogTransport(const ClientOptions& client) {
  spdlog::info("transport to {}: {}", client.address,
               DescribeCredentials(client.credentials, CredentialsSide::kChannel));
  const std::string host = client.address.substr(0, client.address.rfind(':'));
  if (client.credentials.kind == "insecure" && !IsLoopbackHost(host)) {
    spdlog::warn("connecting to {} in plaintext: samples cross the network unencrypted and "
                 "unauthenticated; if the server has TLS, give its CA (--tls-ca / tls_ca) and "
                 "the client certificate and token it requires",
                 client.address);
  }
}

}  // namespace

Job::~Job() {
  // The loader uses the policy and the servers; the policy the servers.
  loader_.reset();
  policy_.reset();
  servers_.reset();
}

absl::StatusOr<std::unique_ptr<Job>> Job::Connect(JobSpec spec) {
  RETURN_IF_ERROR(spec.Validate());
  std::unique_ptr<Job> job(new Job(std::move(spec)));
  JobSpec& s = job->spec_;
  const std::vector<ClientOptions> clients = s.servers.Clients();
  for (const ClientOptions& client : clients) LogTransport(client);
  ASSIGN_OR_RETURN(job->servers_, ServerSet::Connect(clients));
  ServerSet& servers = *job->servers_;
  // Before profiling or building a model: the loader would refuse it later.
  for (int i = 0; i < servers.size(); ++i) {
    const ServerManifest& m = servers.client(i)->manifest();
    RETURN_IF_ERROR(CheckJpegDecodingAgrees(m, servers.address(i), s.loader.pipeline.limits));
    spdlog::info("connected to {}: dataset '{}', {} samples, {} classes, server prep workers {}",
                 servers.address(i), m.dataset_name, m.num_samples(), m.class_names.size(),
                 m.prep_workers);
  }
  if (servers.size() > 1) spdlog::info("dataset layout: {}", servers.Describe());
  int64_t dataset_bytes = 0;  // as the disk tier's entries: each file and its header
  std::vector<uint32_t> versions;
  if (!s.cache.dir.empty()) versions.reserve(servers.manifest().num_samples());
  for (uint64_t id = 0; id < servers.manifest().num_samples(); ++id) {
    dataset_bytes +=
        static_cast<int64_t>(servers.manifest().raw_size(id)) + DiskSampleCache::kHeaderBytes;
    if (!s.cache.dir.empty()) versions.push_back(servers.manifest().version(id));
  }
  ASSIGN_OR_RETURN(s.loader.sample_cache,
                   OpenSampleCache(s.cache, servers.manifest().fingerprint(),
                                   servers.manifest().num_samples(), dataset_bytes,
                                   std::move(versions)));
  if (s.loader.sample_cache != nullptr) {
    spdlog::info("sample cache: {:.1f} MB in memory ({}){}", s.cache.memory_bytes / 1e6,
                 std::string(CachePolicyName(s.cache.policy)),
                 s.cache.dir.empty()
                     ? std::string()
                     : absl::StrCat(", ", s.cache.dir_bytes / 1e6, " MB in ", s.cache.dir));
  }
  return job;
}

absl::StatusOr<std::unique_ptr<Job>> Job::Assemble(JobSpec spec) {
  ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Connect(std::move(spec)));
  RETURN_IF_ERROR(job->Plan());
  RETURN_IF_ERROR(job->Start());
  return job;
}

absl::Status Job::Plan() {
  if (policy_ != nullptr) return absl::FailedPreconditionError("Job::Plan: planned already");
  if (!spec_.smart()) {
    policy_ = std::make_unique<FixedPolicy>(FixedKindStage(spec_.mode), ModeName(spec_.mode));
    return absl::OkStatus();
  }
  SmartoffOptions smart = spec_.smartoff;
  smart.planner = spec_.mode;
  // The plan knows what this node holds (the loader's options keep the cache).
  PlanWithSampleCache(spec_.loader.sample_cache.get(), &smart);
  RETURN_IF_ERROR(smart.Validate());
  ASSIGN_OR_RETURN(policy_,
                   CreateSmartoffFor(servers_.get(), spec_.loader, smart, spec_.ingress_mbit));
  return absl::OkStatus();
}

void Job::Close() {
  closed_ = true;
  std::shared_ptr<Loader> loader = std::move(loader_);
  if (loader != nullptr) loader->Stop();
}

absl::Status Job::Start() {
  if (policy_ == nullptr) return absl::FailedPreconditionError("Job::Start: no plan yet (Plan)");
  if (loader_ != nullptr || closed_) {
    return absl::FailedPreconditionError("Job::Start: started already");
  }
  if (spec_.share.enabled() && spec_.loader.batch_share == nullptr) {
    // Features and predictions also depend on the servers' models.
    std::string models;
    if (spec_.loader.target >= Stage::kFeatures) {
      for (int i = 0; i < servers_->size(); ++i) {
        const ServerManifest& m = servers_->client(i)->manifest();
        absl::StrAppend(&models, m.backbone_fingerprint, ",", m.head_fingerprint, ";");
      }
    }
    ASSIGN_OR_RETURN(spec_.loader.batch_share,
                     BatchShare::Open(spec_.share,
                                      BatchShareKey(spec_.loader, servers_->manifest().fingerprint(),
                                                    models.empty() ? 0 : StableDigest(models))));
    spdlog::info("shared batches: {} (the node's jobs with the same batches read each other's; "
                 "{:.0f} MB window)",
                 spec_.loader.batch_share->folder(), spec_.share.window_bytes / 1e6);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader,
                   Loader::Create(servers_.get(), spec_.loader, policy_.get()));
  loader_ = std::move(loader);
  return absl::OkStatus();
}

}  // namespace sophon
