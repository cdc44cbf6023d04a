// A training-node job assembled from a JobSpec, in steps that run one after
// the other:
//   1. Connect: every storage server (in parallel), each checked to decode
//      JPEGs as this node will; this node's sample cache opened.
//   2. Plan: the offload policy: a fixed mode, or smartoff (its link and
//      server measured, the dataset profiled or its profile read, the first
//      plan made).
//   3. Start: the loader, which asks the policy where each sample goes.
// Between the steps the caller may still adjust the spec: the target stage
// and backbone once it has loaded a model (fine-tuning, inference), the
// training step's time it measured (smartoff), or the mode once it has seen
// the servers' manifests (sophon-infer --mode=auto). Assemble runs the three.
//
// The job owns the servers, the policy and the loader, and destroys them in
// the reverse order.
#ifndef SOPHON_CLIENT_JOB_JOB_H_
#define SOPHON_CLIENT_JOB_JOB_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/job/job_spec.h"
#include "client/loader/loader.h"
#include "client/loader/server_set.h"
#include "client/loader/offload_policy.h"

namespace sophon {

class Job {
 public:
  // Step 1. Validates `spec` (JobSpec::Validate) before reaching any server.
  static absl::StatusOr<std::unique_ptr<Job>> Connect(JobSpec spec);
  // Steps 1 to 3.
  static absl::StatusOr<std::unique_ptr<Job>> Assemble(JobSpec spec);
  ~Job();

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // The spec; changes before Plan and Start take effect there.
  JobSpec& spec() { return spec_; }
  const JobSpec& spec() const { return spec_; }
  ServerSet* servers() const { return servers_.get(); }

  // Step 2: the policy. FailedPrecondition if it has been made already.
  absl::Status Plan();
  // Step 3: the loader (after Plan). FailedPrecondition if out of order.
  absl::Status Start();

  // Null before Plan / Start (the loader also after Close).
  OffloadPolicy* policy() const { return policy_.get(); }
  Loader* loader() const { return loader_.get(); }
  // The loader as a reference a caller holds across a call that another
  // thread may Close under it (the Python module): the loader lives until
  // the last reference goes.
  std::shared_ptr<Loader> shared_loader() const { return loader_; }
  // Stops the loader (its streams and threads) and lets it go; the servers
  // and the policy stay. Idempotent. Not thread-safe itself: a caller that
  // closes from another thread serializes Close and shared_loader.
  void Close();

 private:
  explicit Job(JobSpec spec) : spec_(std::move(spec)) {}

  JobSpec spec_;
  std::unique_ptr<ServerSet> servers_;
  std::unique_ptr<OffloadPolicy> policy_;
  std::shared_ptr<Loader> loader_;
  bool closed_ = false;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_JOB_JOB_H_
