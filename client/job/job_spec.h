// A training-node job as options: which storage servers and how to reach
// them, the loader, where preprocessing runs (the mode and smartoff's
// options) and this node's sample cache. Every training-node program
// (sophon-train, sophon-infer, the benchmarks) and the Python module fill one
// from their arguments; Job (job.h) turns it into a running job.
#ifndef SOPHON_CLIENT_JOB_JOB_SPEC_H_
#define SOPHON_CLIENT_JOB_JOB_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/loader/batch_share.h"
#include "client/loader/loader.h"
#include "client/loader/sample_cache.h"
#include "client/loader/sample_client.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/net/credentials.h"
#include "sophon/planning/planner.h"

namespace sophon {

// The job's storage servers and the transport to every one of them.
struct ServersSpec {
  // HOST:PORT of each server (ParseServerList / ReadServersFile); at least
  // one. Servers with the same dataset fingerprint are replicas, others shards.
  std::vector<std::string> addresses;
  // The channel's credentials, the same for every server. kind "auto": "tls"
  // when a TLS field is set, else "insecure" (DefaultCredentialsKind).
  CredentialsOptions credentials = AutoCredentials();
  // Retry budget while a server is unreachable or full (ClientOptions).
  absl::Duration connect_timeout = absl::Seconds(30);

  static CredentialsOptions AutoCredentials() {
    CredentialsOptions c;
    c.kind = "auto";
    return c;
  }
  // The credentials with kind "auto" resolved.
  CredentialsOptions ResolvedCredentials() const;
  // One ClientOptions per address.
  std::vector<ClientOptions> Clients() const;
  // Names the field: "ServersSpec.addresses ...", "CredentialsOptions.tls_key ...".
  absl::Status Validate() const;
};

// What a job reads and how: everything Job needs to connect, plan and load.
struct JobSpec {
  ServersSpec servers;
  // The loader's options; Job sets `loader.sample_cache` from `cache`.
  LoaderOptions loader;
  // This node's cache of whole sample files (none by default).
  LocalCacheOptions cache;
  // The finished batches this job shares with the node's other jobs that make
  // the same ones (the trials of a search: one dataset, one seed); off by
  // default. Job sets `loader.batch_share` from it.
  BatchShareOptions share;
  // Where each sample's preprocessing runs: a fixed mode (nooff, resizeoff,
  // alloff, featuresoff, predictionsoff) or a planner (optimal, sophon:
  // smartoff with `smartoff`).
  PlannerKind mode = PlannerKind::kNoOff;
  // smartoff's options (`smartoff.planner` is set from `mode`).
  SmartoffOptions smartoff;
  // smartoff with several servers: this node's ingress link in Mbit/s; 0 =
  // not a limit; -1 = probe every server at once (CreateClusterSmartoffPolicy).
  double ingress_mbit = -1;

  bool smart() const { return !IsFixedKind(mode); }
  // The one place a job's options are checked before any server is reached;
  // names the field (`LoaderOptions.batch_size ...`, `JobSpec.ingress_mbit ...`).
  absl::Status Validate() const;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_JOB_JOB_SPEC_H_
