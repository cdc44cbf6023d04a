#include "client/torch/fused_trainer.h"

#include <torch/nn.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/torch/fused_models.h"
#include "client/torch/fused_optimizer.h"
#include "client/torch/torch_step.h"
#include "client/torch/torch_trainer_base.h"
#include "model/models.h"
#include "sophon/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// The parameters a fused trainer of `options` changes: every model's head
// when fine-tuning, else all.
std::vector<torch::Tensor> FusedTrainedParameters(const TrainerOptions& options,
                                                  const FusedClassifier& model) {
  return options.finetune ? HeadParameters(*model, options.arch) : model->parameters();
}

class FusedTrainer final : public TorchTrainerBase {
 public:
  // REQUIRES: model already lives on `device`.
  FusedTrainer(const TrainerOptions& options, FusedClassifier model,
               std::unique_ptr<FusedOptimizer> optimizer, torch::Device device,
               std::unique_ptr<DataParallel> data_parallel)
      : TorchTrainerBase(options, device, std::move(data_parallel)),
        model_(std::move(model)),
        optimizer_(std::move(optimizer)) {}

  absl::StatusOr<std::vector<std::string>> Save(const std::string& path) override;

  void BeginEpoch(int epoch, int epochs) override {
    std::vector<double> lrs;
    for (const Hyperparameters& h : options_.models) {
      lrs.push_back(ScheduledLearningRate(options_.lr_schedule, h.lr, epoch, epochs));
    }
    SetLearningRates(lrs);
  }

 private:
  torch::nn::Module& module() const override { return *model_; }
  std::vector<torch::Tensor> TrainedParameters() const override {
    return FusedTrainedParameters(options_, model_);
  }
  void ZeroGrad() override { optimizer_->ZeroGrad(); }
  torch::Tensor Forward(const BatchTensors& t, int64_t n, bool train) override;
  void OptimizerStep() override { optimizer_->Step(); }
  absl::StatusOr<std::function<void()>> NewTrialOptimizer() override {
    ASSIGN_OR_RETURN(std::shared_ptr<FusedOptimizer> optimizer,
                     FusedOptimizer::Create(options_.optimizer, TrainedParameters(),
                                            options_.models));
    return std::function<void()>([optimizer] { optimizer->Step(); });
  }
  StepResult EmptyResult() const override {
    StepResult result;
    result.models.resize(static_cast<size_t>(model_->num_models()));
    return result;
  }

  c10::impl::GenericDict OptimizerState() const override { return optimizer_->State(); }
  absl::Status LoadOptimizerState(const c10::impl::GenericDict& state) override {
    return optimizer_->LoadState(state);
  }
  absl::Status LoadArchivedOptimizer(torch::serialize::InputArchive& archive) override {
    return optimizer_->LoadArchived(archive);
  }
  std::vector<double> LearningRates() const override { return optimizer_->LearningRates(); }
  void SetLearningRates(const std::vector<double>& lrs) override {
    // One rate per model by construction (checkpoints are checked before).
    optimizer_->SetLearningRates(lrs).IgnoreError();
  }

  // Constant after construction.
  const FusedClassifier model_;
  // Mutated by every Step().
  const std::unique_ptr<FusedOptimizer> optimizer_;
};

// Each model's mean cross-entropy over the batch: logits [B, N, K], labels
// [N] -> [B]. Their sum is the loss to differentiate: model k's parameters
// get exactly the gradient of its own mean loss (HFTA's "loss scaled by B",
// since the mean over all B*N outputs would divide each gradient by B).
torch::Tensor PerModelLoss(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t b = logits.size(0), n = logits.size(1);
  return torch::nn::functional::cross_entropy(
             logits.reshape({b * n, logits.size(2)}), labels.repeat({b}),
             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
      .view({b, n})
      .mean(1);
}

torch::Tensor FusedTrainer::Forward(const BatchTensors& t, int64_t n, bool train) {
  // Fine-tuning: every head reads the same features [n, F] (a view, no copy).
  // Float32 logits (under --amp the forward pass gives bfloat16 ones).
  const auto run = [&]() -> torch::Tensor {
    const AutocastScope autocast = ForwardAutocast();
    if (!options_.finetune) return model_->forward(t.images).to(torch::kFloat32);
    const torch::Tensor f = t.images.reshape({n, -1});
    return model_->head(f.unsqueeze(0).expand({model_->num_models(), n, f.size(1)}))
        .to(torch::kFloat32);
  };
  torch::Tensor logits;
  torch::Tensor losses;
  if (train) {
    model_->train();
    logits = run();
    losses = PerModelLoss(logits, t.labels);
    Backward(losses.sum());
  } else {
    torch::NoGradGuard no_grad;
    model_->eval();
    logits = run();
    losses = PerModelLoss(logits, t.labels);
  }
  const torch::Tensor correct = logits.detach().argmax(2).eq(t.labels.unsqueeze(0)).sum(1);
  return torch::stack({losses.detach().to(torch::kDouble), correct.to(torch::kDouble)});
}

absl::StatusOr<std::vector<std::string>> FusedTrainer::Save(const std::string& path) {
  std::vector<std::string> files;
  const int b = static_cast<int>(model_->num_models());
  try {
    // One CPU model, filled from each slot in turn (copy_ reads across devices).
    ASSIGN_OR_RETURN(Classifier model,
                     MakeModel(options_.arch, options_.num_classes, options_.dropout));
    for (int k = 0; k < b; ++k) {
      const std::string file = ModelCheckpointPath(path, k, b, /*fused=*/true);
      RETURN_IF_ERROR(UnpackModel(model_, k, model));
      if (absl::Status saved = SaveModel(model, options_.arch, options_.num_classes, file);
          !saved.ok()) {
        return absl::Status(saved.code(), absl::StrCat("model ", k, ": ", saved.message()));
      }
      files.push_back(file);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("saving the fused models to '", path, "': ", ExceptionText(e)));
  }
  return files;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TorchTrainerBase>> CreateFusedTrainer(
    const TrainerOptions& options, torch::Device device,
    std::unique_ptr<DataParallel> data_parallel) {
  const int b = options.num_models();
  ASSIGN_OR_RETURN(FusedClassifier fused,
                   MakeFusedModel(options.arch, options.num_classes, b, options.dropout));
  // Model k starts exactly as an ordinary model built with seed + k, or every
  // model from the checkpoint: build it, then copy it into its slot.
  if (options.finetune) {
    // Model k: the checkpoint, with a new head from seed + k when the class
    // count differs.
    for (int k = 0; k < b; ++k) {
      torch::manual_seed(options.seed + static_cast<uint64_t>(k));
      ASSIGN_OR_RETURN(Classifier model,
                       LoadForFinetuning(options.init_checkpoint, options.arch,
                                         options.num_classes, options.dropout));
      RETURN_IF_ERROR(PackModel(model, k, fused));
    }
    for (torch::Tensor& p : fused->parameters()) p.set_requires_grad(false);
    for (torch::Tensor& p : FusedTrainedParameters(options, fused)) p.set_requires_grad(true);
  } else if (!options.init_checkpoint.empty()) {
    ASSIGN_OR_RETURN(Classifier model,
                     MakeModel(options.arch, options.num_classes, options.dropout));
    RETURN_IF_ERROR(LoadModel(options.init_checkpoint, options.arch, options.num_classes, model));
    for (int k = 0; k < b; ++k) RETURN_IF_ERROR(PackModel(model, k, fused));
  } else {
    for (int k = 0; k < b; ++k) {
      torch::manual_seed(options.seed + static_cast<uint64_t>(k));
      ASSIGN_OR_RETURN(Classifier model,
                       MakeModel(options.arch, options.num_classes, options.dropout));
      RETURN_IF_ERROR(PackModel(model, k, fused));
    }
  }
  fused->to(device);
  if (options.channels_last) ToChannelsLast(*fused);
  ASSIGN_OR_RETURN(std::unique_ptr<FusedOptimizer> optimizer,
                   FusedOptimizer::Create(options.optimizer,
                                          FusedTrainedParameters(options, fused), options.models));
  int64_t num_params = 0;
  for (const torch::Tensor& p : FusedTrainedParameters(options, fused)) num_params += p.numel();
  spdlog::info("trainer: fused array of {} x {}{} ({} classes, {} in all{}{}) on {}, "
               "{} ({} schedule), {} intra-op threads",
               b, options.finetune ? "heads of " : "", options.arch, options.num_classes,
               options.finetune ? absl::StrCat(num_params, " trained parameters")
                                : absl::StrFormat("%.1fM parameters", num_params / 1e6),
               options.init_checkpoint.empty() ? ", model k from seed " : ", every model from ",
               options.init_checkpoint.empty() ? absl::StrCat(options.seed, "+k")
                                               : options.init_checkpoint,
               device.str(), OptimizerName(options.optimizer),
               LrScheduleName(options.lr_schedule), torch::get_num_threads());
  for (int k = 0; k < b; ++k) {
    spdlog::info("trainer: model {}: {}", k,
                 DescribeHyperparameters(options.optimizer, options.models[k]));
  }
  return std::unique_ptr<TorchTrainerBase>(new FusedTrainer(
      options, std::move(fused), std::move(optimizer), device, std::move(data_parallel)));
}

}  // namespace sophon
