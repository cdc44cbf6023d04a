// The LibTorch trainer of one ordinary model, and Trainer::Create, which
// picks it or the fused array's trainer (fused_trainer.h).
#include "client/train/trainer.h"

#include <ATen/Context.h>
#include <torch/nn.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/torch/fused_models.h"
#include "client/torch/fused_trainer.h"
#include "client/torch/optimizer_state.h"
#include "client/torch/process_group.h"
#include "client/torch/torch_step.h"
#include "client/torch/torch_trainer_base.h"
#include "model/models.h"
#include "sophon/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// The parameters a trainer of `options` changes: the head's when
// fine-tuning, else all.
std::vector<torch::Tensor> TrainedParametersOf(const TrainerOptions& options,
                                               const Classifier& model) {
  return options.finetune ? HeadParameters(*model, options.arch) : model->parameters();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainerOptions& options,
                                                       const Classifier& model) {
  const Hyperparameters& h = options.models[0];
  if (options.optimizer == OptimizerKind::kAdam) {
    return std::make_unique<torch::optim::Adam>(
        TrainedParametersOf(options, model), torch::optim::AdamOptions(h.lr)
                                                 .betas({h.beta1, h.beta2})
                                                 .eps(h.eps)
                                                 .weight_decay(h.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      TrainedParametersOf(options, model),
      torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weight_decay));
}

class TorchTrainer final : public TorchTrainerBase {
 public:
  // REQUIRES: model already lives on `device`.
  TorchTrainer(const TrainerOptions& options, Classifier model, torch::Device device,
               std::unique_ptr<DataParallel> data_parallel)
      : TorchTrainerBase(options, device, std::move(data_parallel)),
        model_(std::move(model)),
        optimizer_(MakeOptimizer(options, model_)) {}

  absl::StatusOr<std::vector<std::string>> Save(const std::string& path) override;

  void BeginEpoch(int epoch, int epochs) override {
    SetLearningRates(
        {ScheduledLearningRate(options_.lr_schedule, options_.models[0].lr, epoch, epochs)});
  }

 private:
  torch::nn::Module& module() const override { return *model_; }
  std::vector<torch::Tensor> TrainedParameters() const override {
    return TrainedParametersOf(options_, model_);
  }
  // Gradients dropped, not zeroed: backward allocates them afresh (no memset
  // kernel per parameter), and the optimizers skip a parameter without one.
  void ZeroGrad() override { model_->zero_grad(/*set_to_none=*/true); }
  torch::Tensor Forward(const BatchTensors& t, int64_t n, bool train) override;
  void OptimizerStep() override { optimizer_->step(); }
  absl::StatusOr<std::function<void()>> NewTrialOptimizer() override {
    std::shared_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(options_, model_);
    return std::function<void()>([optimizer] { optimizer->step(); });
  }
  StepResult EmptyResult() const override { return StepResult{}; }

  c10::impl::GenericDict OptimizerState() const override {
    return SaveOptimizerState(*optimizer_, options_.optimizer);
  }
  absl::Status LoadOptimizerState(const c10::impl::GenericDict& state) override {
    return sophon::LoadOptimizerState(state, *optimizer_, options_.optimizer);
  }
  absl::Status LoadArchivedOptimizer(torch::serialize::InputArchive& archive) override;
  std::vector<double> LearningRates() const override {
    return {optimizer_->param_groups().front().options().get_lr()};
  }
  void SetLearningRates(const std::vector<double>& lrs) override {
    for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
      group.options().set_lr(lrs.front());
    }
  }

  // Constant after construction.
  const Classifier model_;
  // Mutated by every Step().
  const std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

torch::Tensor TorchTrainer::Forward(const BatchTensors& t, int64_t n, bool train) {
  // Fine-tuning: the batch holds the frozen backbone's features [n, F].
  const auto run = [&] {
    // Float32 logits (under --amp the forward pass gives bfloat16 or float16
    // ones): the loss and its gradient in full precision.
    const AutocastScope autocast = ForwardAutocast();
    return (options_.finetune ? model_->head(t.images.reshape({n, -1}))
                              : model_->forward(t.images))
        .to(torch::kFloat32);
  };
  torch::Tensor logits;
  torch::Tensor loss;
  if (train) {
    model_->train();
    logits = run();
    loss = torch::nn::functional::cross_entropy(logits, t.labels);
    Backward(loss);
  } else {
    torch::NoGradGuard no_grad;
    model_->eval();
    logits = run();
    loss = torch::nn::functional::cross_entropy(logits, t.labels);
  }
  const torch::Tensor correct = logits.detach().argmax(1).eq(t.labels).sum();
  return torch::stack({loss.detach().to(torch::kDouble), correct.to(torch::kDouble)}).view({2, 1});
}

absl::Status TorchTrainer::LoadArchivedOptimizer(torch::serialize::InputArchive& archive) {
  // LibTorch's own format; its load checks the parameter groups and throws.
  optimizer_->load(archive);
  if (device_.is_cpu()) return absl::OkStatus();
  // Loaded state lives on the CPU: move it to the parameters' device.
  for (auto& [key, state] : optimizer_->state()) {
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      sgd->momentum_buffer(sgd->momentum_buffer().to(device_));
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      adam->exp_avg(adam->exp_avg().to(device_));
      adam->exp_avg_sq(adam->exp_avg_sq().to(device_));
      if (adam->max_exp_avg_sq().defined()) {
        adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(device_));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> TorchTrainer::Save(const std::string& path) {
  const std::string file = ModelCheckpointPath(path, 0, 1, /*fused=*/false);
  try {
    // Checkpoints hold CPU tensors, whatever device trained them (SaveModel
    // copies them; the model stays on its device).
    RETURN_IF_ERROR(SaveModel(model_, options_.arch, options_.num_classes, file));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("saving the model to '", file, "': ", ExceptionText(e)));
  }
  return std::vector<std::string>{file};
}

absl::StatusOr<std::unique_ptr<TorchTrainerBase>> CreateTorchTrainer(
    const TrainerOptions& options, torch::Device device,
    std::unique_ptr<DataParallel> data_parallel) {
  torch::manual_seed(options.seed);
  Classifier model;
  bool new_head = false;
  if (options.finetune) {
    ASSIGN_OR_RETURN(model, LoadForFinetuning(options.init_checkpoint, options.arch,
                                              options.num_classes, options.dropout, &new_head));
    // The backbone is frozen: only the head's parameters get gradients.
    for (torch::Tensor& p : model->parameters()) p.set_requires_grad(false);
    for (torch::Tensor& p : HeadParameters(*model, options.arch)) p.set_requires_grad(true);
  } else {
    ASSIGN_OR_RETURN(model, MakeModel(options.arch, options.num_classes, options.dropout));
    if (!options.init_checkpoint.empty()) {
      RETURN_IF_ERROR(
          LoadModel(options.init_checkpoint, options.arch, options.num_classes, model));
    }
  }
  model->to(device);
  if (options.channels_last) ToChannelsLast(*model);
  int64_t num_params = 0;
  for (const torch::Tensor& p : TrainedParametersOf(options, model)) num_params += p.numel();
  spdlog::info(
      "trainer: {}{} ({} classes, {}{}{}) on {}, {} {} ({} schedule), {} intra-op threads",
      options.finetune ? (new_head ? "a new head of " : "the head of ") : "", options.arch,
      options.num_classes,
      options.finetune ? absl::StrCat(num_params, " trained parameters")
                       : absl::StrFormat("%.1fM parameters", num_params / 1e6),
      options.init_checkpoint.empty() ? "" : ", from ",
      options.init_checkpoint, device.str(),
      OptimizerName(options.optimizer), DescribeHyperparameters(options.optimizer, options.models[0]),
      LrScheduleName(options.lr_schedule), torch::get_num_threads());
  return std::unique_ptr<TorchTrainerBase>(
      new TorchTrainer(options, std::move(model), device, std::move(data_parallel)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  RETURN_IF_ERROR(options.fused ? CheckFusable(options.arch) : CheckModelName(options.arch));
  try {
    ASSIGN_OR_RETURN(const torch::Device device, ResolveDevice(options.device));
    // Process-wide in LibTorch.
    if (options.threads > 0) torch::set_num_threads(options.threads);
    // cuDNN picks the fastest convolution for each input shape it meets (the
    // shapes of a training run are few: the batch, and a last partial one).
    if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
    // Ranks join before building their models, so that one failing to build
    // leaves the others a dead rank (named at once) rather than a rendezvous
    // timeout.
    std::unique_ptr<DataParallel> data_parallel;
    if (options.distributed.world_size > 1) {
      ASSIGN_OR_RETURN(data_parallel, DataParallel::Create(options.distributed, options.device));
    }
    std::unique_ptr<TorchTrainerBase> trainer;
    if (options.fused) {
      ASSIGN_OR_RETURN(trainer, CreateFusedTrainer(options, device, std::move(data_parallel)));
    } else {
      ASSIGN_OR_RETURN(trainer, CreateTorchTrainer(options, device, std::move(data_parallel)));
    }
    RETURN_IF_ERROR(trainer->BroadcastInitialState());
    return std::unique_ptr<Trainer>(std::move(trainer));
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return absl::InternalError(absl::StrCat("creating the ", options.arch, " trainer on ",
                                            options.device, " failed: ", ExceptionText(e)));
  }
}

}  // namespace sophon
