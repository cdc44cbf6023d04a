// Data-parallel ranks on PyTorch's c10d (Gloo, or NCCL on CUDA): the
// rendezvous (a TCPStore hosted by rank 0), broadcasts from rank 0 and the
// bucketed all-reduce of gradients, every one bounded by
// DistributedOptions.collective_timeout, with errors that name the rank that
// is gone (rank_heartbeat.h).
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_PROCESS_GROUP_H_
#define SOPHON_CLIENT_TORCH_PROCESS_GROUP_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/train/trainer.h"

namespace sophon {

// The c10d backends this build of Sophon was compiled with: Gloo where
// LibTorch has it and its headers were found (Debian's libtorch-dev with
// libgloo-dev; a pip wheel ships no gloo headers), NCCL where LibTorch is a
// CUDA build with c10d's NCCL.
struct CollectiveBackends {
  bool gloo = false;
  bool nccl = false;
};
CollectiveBackends BuiltBackends();

// The backend ranks use: DistributedOptions.backend ("auto": nccl when
// `device` is CUDA and nccl is built, else gloo) checked against `built` and
// `device` ("cpu", "cuda", "cuda:N"). FailedPrecondition naming the backend,
// the device and what to do when the choice cannot work (no Gloo on CPU, NCCL
// without CUDA or not built).
absl::StatusOr<std::string> ChooseBackend(const DistributedOptions& options,
                                          absl::string_view device,
                                          const CollectiveBackends& built);

// Groups tensors into buckets for collectives: consecutive tensors of one
// dtype and device whose bytes add up to at most `bucket_bytes` (a tensor
// larger than that is a bucket of its own). Returns the tensors' indices.
std::vector<std::vector<size_t>> BucketsOf(const std::vector<torch::Tensor>& tensors,
                                           int64_t bucket_bytes);

// One rank of a process group. Every rank must make the same calls in the
// same order with tensors of the same shapes (they are collectives).
// Not thread-safe: one thread makes the calls.
class DataParallel {
 public:
  // Joins the group: rank 0 hosts a c10d TCPStore at master_addr:master_port,
  // the others connect to it (retrying until the timeout); then Gloo connects
  // every pair of ranks through the store (waiting for every rank), over
  // loopback when master_addr is a loopback address and otherwise over the
  // interface this host's name resolves to. Everything is bounded by
  // collective_timeout.
  // InvalidArgument for bad options or world_size < 2; Unavailable naming
  // the rank, address and port when the rendezvous fails.
  // `device` is where the model's tensors are: it decides the backend of
  // DistributedOptions.backend "auto" (ChooseBackend with BuiltBackends()).
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(const DistributedOptions& options,
                                                              absl::string_view device = "cpu");
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }

  // Copies rank 0's values into every rank's tensors, in place, bucketed.
  // `what` names them in errors ("parameters", "buffers").
  absl::Status Broadcast(const std::vector<torch::Tensor>& tensors, absl::string_view what);
  // Replaces each parameter's gradient by its mean over the ranks: one
  // all-reduce (sum) per bucket of about bucket_bytes of flattened gradients,
  // then a division by world_size. An undefined gradient counts as zeros and
  // is defined afterwards, so a rank without a batch still takes part.
  absl::Status AllReduceGradients(const std::vector<torch::Tensor>& parameters);

  // Collectives issued so far (tests check the bucketing).
  struct Stats {
    int64_t broadcasts = 0;
    int64_t all_reduces = 0;
  };
  Stats stats() const { return stats_; }

 private:
  class Group;  // the c10d objects and the heartbeat (process_group.cc)
  DataParallel(const DistributedOptions& options, std::unique_ptr<Group> group);
  // Runs one collective over `flat`; on failure, Unavailable naming this
  // rank, the collective and the ranks that stopped responding.
  absl::Status Collective(bool broadcast, torch::Tensor& flat, absl::string_view what);

  const DistributedOptions options_;
  const std::unique_ptr<Group> group_;
  Stats stats_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_PROCESS_GROUP_H_
