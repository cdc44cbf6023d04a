// sophon-bench-step-ops: what one training step's optimizer update and input
// finishing cost in operator calls, counted with LibTorch's RecordFunction
// observers, and in milliseconds on this machine's CPU.
//
// On a GPU every top-level operator call our code makes is at least one
// kernel launch (a `_foreach_` call is one launch per few dozen tensors), so
// the top-level count is what the launch overhead scales with; "all" counts
// the calls they make in turn on the CPU too (a `_foreach_` op falls back to
// one call per tensor there).
//
// Tables, Markdown on stdout:
//   optimizer: the fused SGD and Adam over B = 1, 2, 4, 8 models of --arch,
//              both FusedStepOps, against B torch::optim optimizers, one per
//              separate model;
//   input:     bytes of one batch as float32 NCHW (the CPU path's tensors)
//              and as uint8 NHWC (FinishOnDevice's input), and the calls
//              FinishOnDevice makes.
#include <ATen/record_function.h>
#include <torch/nn.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/torch/device_ops.h"
#include "client/torch/fused_models.h"
#include "client/torch/fused_optimizer.h"
#include "model/models.h"
#include "sophon/base/allocator.h"

ABSL_FLAG(std::string, arch, "resnet18", "Architecture whose parameters the optimizers update.");
ABSL_FLAG(std::string, models, "1,2,4,8", "Fused array sizes B, comma-separated.");
ABSL_FLAG(int, steps, 5, "Optimizer steps timed per row (after one untimed step).");
ABSL_FLAG(int, batch, 256, "Images per batch for the input table.");
ABSL_FLAG(int, side, 224, "Image side in pixels for the input table.");

namespace {

// Operator calls during a counted run on this thread, views and allocations
// left out: `top` those our code made (depth 0), `all` including the calls
// made inside them.
thread_local int depth = 0;
thread_local int64_t top_calls = 0;
thread_local int64_t all_calls = 0;

// Calls that launch no kernel on a GPU: views and allocations.
bool LaunchesNothing(const char* name) {
  static const std::set<std::string> kNames = {
      "aten::select", "aten::view",   "aten::as_strided", "aten::alias",  "aten::expand",
      "aten::slice",  "aten::detach", "aten::empty",      "aten::empty_strided",
      "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::transpose", "aten::t",
      "aten::_reshape_alias", "aten::reshape", "aten::lift_fresh"};
  return kNames.count(name) > 0;
}

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  if (!LaunchesNothing(fn.name())) {
    if (depth == 0) ++top_calls;
    ++all_calls;
  }
  ++depth;
  return nullptr;
}
void OnEnd(const at::RecordFunction&, at::ObserverContext*) { --depth; }

struct Calls {
  int64_t top = 0, all = 0;
  double ms = 0;
};

// Calls and wall time of `work` per run, averaged over `runs` after one
// untimed run; `prepare` runs before each and is neither counted nor timed.
Calls Count(const std::function<void()>& prepare, const std::function<void()>& work, int runs) {
  prepare();
  work();
  Calls calls;
  for (int i = 0; i < runs; ++i) {
    prepare();
    at::CallbackHandle handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(OnStart, OnEnd).scopes({at::RecordScope::FUNCTION}));
    top_calls = all_calls = 0;
    work();
    at::removeCallback(handle);
    calls.top += top_calls;
    calls.all += all_calls;
    prepare();
    const auto start = std::chrono::steady_clock::now();
    work();
    calls.ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  return Calls{calls.top / runs, calls.all / runs, calls.ms / runs};
}

// Gradients as a backward pass leaves them: fresh tensors every step.
void FakeGradients(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) {
    const_cast<torch::Tensor&>(p).mutable_grad() = torch::full_like(p, 1e-3);
  }
}

int OptimizerTable(const std::string& arch, const std::vector<int>& sizes, int steps) {
  std::printf("| optimizer | B | how | top-level calls | all calls | ms per step |\n");
  std::printf("|---|---:|---|---:|---:|---:|\n");
  const auto row = [](sophon::OptimizerKind kind, int b, const char* how, const Calls& calls) {
    std::printf("| %s | %d | %s | %lld | %lld | %.1f |\n",
                kind == sophon::OptimizerKind::kSgd ? "SGD" : "Adam", b, how,
                static_cast<long long>(calls.top), static_cast<long long>(calls.all), calls.ms);
    std::fflush(stdout);
  };
  for (sophon::OptimizerKind kind : {sophon::OptimizerKind::kSgd, sophon::OptimizerKind::kAdam}) {
    for (int b : sizes) {
      absl::StatusOr<sophon::FusedClassifier> fused = sophon::MakeFusedModel(arch, 1000, b, 0.0);
      if (!fused.ok()) {
        std::fprintf(stderr, "sophon-bench-step-ops: %s\n", fused.status().ToString().c_str());
        return 1;
      }
      std::vector<sophon::Hyperparameters> h(b);
      for (int k = 0; k < b; ++k) h[k].lr = 0.1 / (k + 1);
      const std::vector<torch::Tensor> fused_params = (*fused)->parameters();
      for (sophon::FusedStepOps ops :
           {sophon::FusedStepOps::kForeach, sophon::FusedStepOps::kPerParameter}) {
        absl::StatusOr<std::unique_ptr<sophon::FusedOptimizer>> optimizer =
            sophon::FusedOptimizer::Create(kind, fused_params, h, ops);
        if (!optimizer.ok()) {
          std::fprintf(stderr, "sophon-bench-step-ops: %s\n",
                       optimizer.status().ToString().c_str());
          return 1;
        }
        const Calls calls = Count(
            [&] {
              (*optimizer)->ZeroGrad();
              FakeGradients(fused_params);
            },
            [&] { (*optimizer)->Step(); }, steps);
        row(kind, b, ops == sophon::FusedStepOps::kForeach ? "fused, `_foreach_`"
                                                           : "fused, per parameter",
            calls);
      }

      std::vector<sophon::Classifier> separate;
      std::vector<std::unique_ptr<torch::optim::Optimizer>> references;
      for (int k = 0; k < b; ++k) {
        separate.push_back(*sophon::MakeModel(arch, 1000, 0.0));
        if (kind == sophon::OptimizerKind::kSgd) {
          references.push_back(std::make_unique<torch::optim::SGD>(
              separate[k]->parameters(), torch::optim::SGDOptions(h[k].lr)
                                             .momentum(h[k].momentum)
                                             .weight_decay(h[k].weight_decay)));
        } else {
          references.push_back(std::make_unique<torch::optim::Adam>(
              separate[k]->parameters(),
              torch::optim::AdamOptions(h[k].lr).weight_decay(h[k].weight_decay)));
        }
      }
      const Calls separate_calls = Count(
          [&] {
            for (int k = 0; k < b; ++k) {
              references[k]->zero_grad();
              FakeGradients(separate[k]->parameters());
            }
          },
          [&] {
            for (int k = 0; k < b; ++k) references[k]->step();
          },
          steps);
      row(kind, b, "B torch::optim, one per separate model", separate_calls);
    }
  }
  return 0;
}

void InputTable(int batch, int side) {
  const torch::Tensor crops = torch::randint(0, 256, {batch, side, side, 3}, torch::kUInt8);
  const torch::Tensor flip = torch::rand({batch}) < 0.5;
  torch::Tensor finished;
  const Calls finish =
      Count([] {}, [&] { finished = sophon::FinishOnDevice(crops, flip); }, 3);
  std::printf("\n| batch on the way to the device | bytes per batch | FinishOnDevice: "
              "top-level calls | all calls | ms (CPU) |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  std::printf("| float32 NCHW, %d x 3 x %d x %d | %lld | - | - | - |\n", batch, side, side,
              static_cast<long long>(finished.numel() * finished.element_size()));
  std::printf("| uint8 NHWC, %d x %d x %d x 3 | %lld | %lld | %lld | %.1f |\n", batch, side, side,
              static_cast<long long>(crops.numel()), static_cast<long long>(finish.top),
              static_cast<long long>(finish.all), finish.ms);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Counts the operator calls of the fused optimizers' step against separate torch::optim "
      "optimizers, and of FinishOnDevice.\n  sophon-bench-step-ops [--arch=resnet18] "
      "[--models=1,2,4,8]");
  absl::ParseCommandLine(argc, argv);
  sophon::ConfigureAllocatorForLargeBuffers();
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1) {
      std::fprintf(stderr, "sophon-bench-step-ops: --models=%s: '%s' is not a count >= 1\n",
                   absl::GetFlag(FLAGS_models).c_str(), std::string(part).c_str());
      return 2;
    }
    sizes.push_back(b);
  }
  std::printf("arch %s, %d threads\n\n", absl::GetFlag(FLAGS_arch).c_str(),
              torch::get_num_threads());
  if (OptimizerTable(absl::GetFlag(FLAGS_arch), sizes, absl::GetFlag(FLAGS_steps)) != 0) return 1;
  InputTable(absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_side));
  return 0;
}
