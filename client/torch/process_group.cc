#include "client/torch/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if SOPHON_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if SOPHON_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/utils.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/torch/rank_heartbeat.h"
#include "client/torch/torch_step.h"
#include "sophon/base/status_macros.h"
#include "spdlog/spdlog.h"

// CMake defines both (0 or 1) from what it found (CMakeLists.txt, "c10d backends").
#if !defined(SOPHON_WITH_GLOO) || !defined(SOPHON_WITH_NCCL)
#error "SOPHON_WITH_GLOO and SOPHON_WITH_NCCL must be defined (0 or 1) by the build"
#endif
#if SOPHON_WITH_GLOO && !defined(USE_C10D_GLOO)
#error "SOPHON_WITH_GLOO needs USE_C10D_GLOO (LibTorch's c10d Gloo declarations)"
#endif

namespace sophon {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address == "::1" || absl::StartsWith(address, "127.");
}

// TCPStoreOptions.useLibUV: LibTorch 2.4 and later default to the libuv
// store, which a LibTorch built without libuv (Debian 13's 2.6) refuses to
// make ("use_libuv was requested but PyTorch was build without libuv
// support"); 1.13 has no such option. Both sides of a store must agree.
template <typename Options>
auto SetLibUv(Options& options, bool on, int) -> decltype(options.useLibUV = on, void()) {
  options.useLibUV = on;
}
template <typename Options>
void SetLibUv(Options&, bool, long) {}

// A TCPStore, with the libuv store where this LibTorch has it, else the
// classic one.
c10::intrusive_ptr<c10d::TCPStore> MakeStore(const std::string& address,
                                             c10d::TCPStoreOptions options) {
  try {
    return c10::make_intrusive<c10d::TCPStore>(address, options);
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("libuv") == std::string::npos) throw;
  }
  SetLibUv(options, false, 0);
  return c10::make_intrusive<c10d::TCPStore>(address, options);
}

// A client of the store at address:port that counts for no rank (the
// heartbeat's own connections).
c10::intrusive_ptr<c10d::TCPStore> StoreClient(const std::string& address, int port,
                                               absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = ToChrono(timeout);
  return MakeStore(address, options);
}

// The bucket's tensors flattened and concatenated (a copy).
torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors, const std::vector<size_t>& bucket) {
  std::vector<torch::Tensor> parts;
  parts.reserve(bucket.size());
  for (const size_t i : bucket) parts.push_back(tensors[i].detach().reshape({-1}));
  return torch::cat(parts);
}

// Copies `flat` back into the bucket's tensors.
void Unflatten(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors,
               const std::vector<size_t>& bucket) {
  int64_t offset = 0;
  for (const size_t i : bucket) {
    torch::Tensor t = tensors[i];
    t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

}  // namespace

CollectiveBackends BuiltBackends() {
  CollectiveBackends b;
  b.gloo = SOPHON_WITH_GLOO != 0;
  b.nccl = SOPHON_WITH_NCCL != 0;
  return b;
}

absl::StatusOr<std::string> ChooseBackend(const DistributedOptions& options,
                                          absl::string_view device,
                                          const CollectiveBackends& built) {
  const bool cuda = absl::StartsWith(device, "cuda");
  std::string backend = options.backend;
  if (backend == "auto") backend = cuda && built.nccl ? "nccl" : "gloo";
  if (backend == "nccl") {
    if (!cuda) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DistributedOptions.backend nccl (--dist-backend) needs the model on CUDA, not '",
          device, "': use --device=cuda or --dist-backend=gloo"));
    }
    if (!built.nccl) {
      return absl::FailedPreconditionError(
          "DistributedOptions.backend nccl (--dist-backend): this build of Sophon has no NCCL "
          "backend (its LibTorch is not a CUDA build with c10d's NCCL); use --dist-backend=gloo");
    }
    return backend;
  }
  if (backend == "gloo" && !built.gloo) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DistributedOptions.backend gloo (--dist-backend", options.backend == "auto" ? "=auto" : "",
        ") for ranks on '", device,
        "': this build of Sophon has no Gloo backend (its LibTorch came without gloo headers, as a "
        "pip wheel does: rebuild with them on the include path or against Debian's libtorch-dev "
        "and libgloo-dev)",
        built.nccl ? "; ranks on CUDA can use --dist-backend=nccl" : ""));
  }
  return backend;
}

std::vector<std::vector<size_t>> BucketsOf(const std::vector<torch::Tensor>& tensors,
                                           int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i];
    const int64_t size = static_cast<int64_t>(t.numel() * t.element_size());
    const bool fits = !buckets.empty() && bytes + size <= bucket_bytes &&
                      tensors[buckets.back().front()].scalar_type() == t.scalar_type() &&
                      tensors[buckets.back().front()].device() == t.device();
    if (!fits) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += size;
  }
  return buckets;
}

// The c10d objects of one rank. Members are destroyed in reverse order: the
// heartbeat (its thread and store clients) first, the store (rank 0: its
// server) last.
class DataParallel::Group {
 public:
  c10::intrusive_ptr<c10d::TCPStore> store;
  // One of the two: the backend of DistributedOptions.backend.
#if SOPHON_WITH_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#if SOPHON_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  std::string backend;
  std::unique_ptr<RankHeartbeat> heartbeat;

  c10::intrusive_ptr<c10d::Work> Broadcast(std::vector<at::Tensor>& io,
                                           const c10d::BroadcastOptions& opts) {
#if SOPHON_WITH_GLOO
    if (gloo) return gloo->broadcast(io, opts);
#endif
#if SOPHON_WITH_NCCL
    if (nccl) return nccl->broadcast(io, opts);
#endif
    throw std::logic_error("no c10d backend");
  }
  c10::intrusive_ptr<c10d::Work> AllReduce(std::vector<at::Tensor>& io,
                                           const c10d::AllreduceOptions& opts) {
#if SOPHON_WITH_GLOO
    if (gloo) return gloo->allreduce(io, opts);
#endif
#if SOPHON_WITH_NCCL
    if (nccl) return nccl->allreduce(io, opts);
#endif
    throw std::logic_error("no c10d backend");
  }
};

DataParallel::DataParallel(const DistributedOptions& options, std::unique_ptr<Group> group)
    : options_(options), group_(std::move(group)) {}

DataParallel::~DataParallel() = default;

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    const DistributedOptions& options, absl::string_view device) {
  RETURN_IF_ERROR(options.Validate());
  if (options.world_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a process group needs DistributedOptions.world_size >= 2, got ", options.world_size));
  }
  ASSIGN_OR_RETURN(const std::string backend, ChooseBackend(options, device, BuiltBackends()));
  // c10d's store and Gloo write to sockets without MSG_NOSIGNAL: a write to a
  // rank that died would raise SIGPIPE and kill this process before the
  // failed collective could name the rank. Ignored process-wide (gRPC
  // already sends without it).
  signal(SIGPIPE, SIG_IGN);
  const std::string address = absl::StrCat(options.master_addr, ":", options.master_port);
  const std::string where = absl::StrCat("rank ", options.rank, " of ", options.world_size,
                                         ": the rendezvous at ", address);
  const std::string within =
      absl::StrCat(" (DistributedOptions.collective_timeout ",
                   absl::FormatDuration(options.collective_timeout), ")");
  auto group = std::make_unique<Group>();
  group->backend = backend;
  // LibTorch 1.13's TCPStore client stops retrying its connection well before
  // its timeout (with 1 s it does not retry at all): a rank that starts before
  // rank 0 listens tries again until the whole timeout has passed.
  const absl::Time deadline = absl::Now() + options.collective_timeout;
  while (group->store == nullptr) {
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(options.master_port);
      store_options.isServer = options.rank == 0;
      store_options.numWorkers = static_cast<size_t>(options.world_size);
      // Gloo's rendezvous below waits for every rank (within the timeout);
      // the store's own wait for workers would add up to another timeout.
      store_options.waitWorkers = false;
      store_options.timeout = ToChrono(
          std::max(absl::Seconds(1), std::min(deadline - absl::Now(), options.collective_timeout)));
      group->store = MakeStore(options.master_addr, store_options);
    } catch (const std::exception& e) {
      constexpr absl::Duration kRetryDelay = absl::Milliseconds(100);
      if (options.rank == 0 || absl::Now() + kRetryDelay >= deadline) {
        return absl::UnavailableError(
            absl::StrCat(where, " failed", within, " (",
                         options.rank == 0 ? "this rank" : "rank 0",
                         " hosts the c10d store there): ", ExceptionText(e)));
      }
      absl::SleepFor(kRetryDelay);
    }
  }

  // A beat every tenth of the timeout (at most a second); store reads and
  // writes of the heartbeat give up after half of it (1 to 5 s: TCPStore's
  // connect timeout is in whole seconds).
  RankHeartbeatOptions heartbeat_options;
  heartbeat_options.rank = options.rank;
  heartbeat_options.world_size = options.world_size;
  heartbeat_options.interval = std::clamp(options.collective_timeout / 10, absl::Milliseconds(10),
                                          absl::Seconds(1));
  heartbeat_options.store_address = address;
  const absl::Duration store_timeout =
      std::clamp(options.collective_timeout / 2, absl::Seconds(1), absl::Seconds(5));
  try {
    ASSIGN_OR_RETURN(group->heartbeat,
                     RankHeartbeat::Start(
                         StoreClient(options.master_addr, options.master_port, store_timeout),
                         StoreClient(options.master_addr, options.master_port, store_timeout),
                         heartbeat_options));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(where, ": cannot connect the heartbeat's store clients: ", ExceptionText(e)));
  }

  const bool loopback = IsLoopback(options.master_addr);
  try {
#if SOPHON_WITH_NCCL
    if (backend == "nccl") {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = ToChrono(options.collective_timeout);
      group->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>("sophon/nccl", group->store), options.rank,
          options.world_size, nccl_options);
    }
#endif
#if SOPHON_WITH_GLOO
    if (backend == "gloo") {
      auto gloo_options =
          c10d::ProcessGroupGloo::Options::create(ToChrono(options.collective_timeout));
      gloo_options->devices.push_back(
          loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                   : c10d::ProcessGroupGloo::createDefaultDevice());
      group->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>("sophon/gloo", group->store), options.rank,
          options.world_size, gloo_options);
    }
#endif
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(where, " (", backend, "'s connections) failed",
                                               within, ": ",
                                               group->heartbeat->DescribeSilentRanks(), "; ",
                                               ExceptionText(e)));
  }
  spdlog::info(
      "data parallel: rank {} of {}, c10d TCPStore at {} (hosted by rank 0), {} over {}, "
      "collective timeout {}, gradient buckets of {} bytes, heartbeat every {}",
      options.rank, options.world_size, address, backend == "nccl" ? "NCCL" : "Gloo",
      backend == "nccl" ? "CUDA" : loopback ? "loopback" : "this host's address",
      absl::FormatDuration(options.collective_timeout), options.bucket_bytes,
      absl::FormatDuration(heartbeat_options.interval));
  return std::unique_ptr<DataParallel>(new DataParallel(options, std::move(group)));
}

absl::Status DataParallel::Collective(bool broadcast, torch::Tensor& flat,
                                      absl::string_view what) {
  std::vector<at::Tensor> io{flat};
  const std::chrono::milliseconds timeout = ToChrono(options_.collective_timeout);
  try {
    c10::intrusive_ptr<c10d::Work> work;
    if (broadcast) {
      c10d::BroadcastOptions opts;
      opts.rootRank = 0;
      opts.rootTensor = 0;
      opts.timeout = timeout;
      ++stats_.broadcasts;
      work = group_->Broadcast(io, opts);
    } else {
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      opts.timeout = timeout;
      ++stats_.all_reduces;
      work = group_->AllReduce(io, opts);
    }
    work->wait();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        group_->heartbeat->DescribeSilentRanks(), "; collective ",
        broadcast ? "broadcast" : "all_reduce", " of ", what, " failed on rank ", options_.rank,
        " of ", options_.world_size, ": ", ExceptionText(e)));
  }
  return absl::OkStatus();
}

absl::Status DataParallel::Broadcast(const std::vector<torch::Tensor>& tensors,
                                     absl::string_view what) {
  torch::NoGradGuard no_grad;
  for (const std::vector<size_t>& bucket : BucketsOf(tensors, options_.bucket_bytes)) {
    torch::Tensor flat = Flatten(tensors, bucket);
    RETURN_IF_ERROR(Collective(/*broadcast=*/true, flat, what));
    if (options_.rank != 0) Unflatten(flat, tensors, bucket);
  }
  return absl::OkStatus();
}

absl::Status DataParallel::AllReduceGradients(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  grads.reserve(parameters.size());
  for (const torch::Tensor& p : parameters) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  for (const std::vector<size_t>& bucket : BucketsOf(grads, options_.bucket_bytes)) {
    torch::Tensor flat = Flatten(grads, bucket);
    RETURN_IF_ERROR(Collective(/*broadcast=*/false, flat, "gradients"));
    flat.div_(options_.world_size);
    Unflatten(flat, grads, bucket);
  }
  return absl::OkStatus();
}

}  // namespace sophon
