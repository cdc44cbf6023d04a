// TrainerOptions: validation, optimizer names and checkpoint paths (no LibTorch).
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/train/trainer.h"

namespace sophon {
namespace {

absl::Status FieldError(int k, const char* field, const char* rule, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat("TrainerOptions.models[", k, "].", field, " must be ", rule, ", got ", value));
}

}  // namespace

absl::StatusOr<Stage> TransferStage(const std::string& transfer, const std::string& device) {
  if (transfer != "auto" && transfer != "float32" && transfer != "uint8") {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer must be auto, float32 or uint8, got '", transfer, "'"));
  }
  const bool uint8 = transfer == "uint8" || (transfer == "auto" && device.rfind("cuda", 0) == 0);
  return uint8 ? Stage::kCropped : Stage::kTensor;
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (valid: sgd, adam)"));
}

const char* OptimizerName(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam ? "adam" : "sgd";
}

std::string DescribeHyperparameters(OptimizerKind kind, const Hyperparameters& h) {
  if (kind == OptimizerKind::kAdam) {
    return absl::StrFormat("lr=%g betas=%g,%g eps=%g weight_decay=%g", h.lr, h.beta1, h.beta2,
                           h.eps, h.weight_decay);
  }
  return absl::StrFormat("lr=%g momentum=%g weight_decay=%g", h.lr, h.momentum, h.weight_decay);
}

absl::StatusOr<LrSchedule> ParseLrSchedule(const std::string& name) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "cosine") return LrSchedule::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning-rate schedule '", name, "' (valid: constant, cosine)"));
}

const char* LrScheduleName(LrSchedule schedule) {
  return schedule == LrSchedule::kCosine ? "cosine" : "constant";
}

double ScheduledLearningRate(LrSchedule schedule, double lr, int epoch, int epochs) {
  if (schedule == LrSchedule::kConstant || epochs <= 0) return lr;
  constexpr double kPi = 3.14159265358979323846;
  return lr * (1 + std::cos(kPi * epoch / epochs)) / 2;
}

absl::Status DistributedOptions::Validate() const {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedOptions.world_size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedOptions.rank must be in [0, ",
                                                   world_size, ") (world_size ", world_size,
                                                   "), got ", rank));
  }
  if (backend != "auto" && backend != "nccl" && backend != "gloo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedOptions.backend must be auto, nccl or gloo, got '", backend, "'"));
  }
  if (world_size == 1) return absl::OkStatus();  // no process group: the rest is unused
  if (master_addr.empty()) {
    return absl::InvalidArgumentError(
        "DistributedOptions.master_addr must name rank 0's host when world_size > 1");
  }
  if (master_port < 1 || master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedOptions.master_port must be in [1, 65535], got ", master_port));
  }
  // c10d's TCPStore counts its connect timeout in whole seconds (LibTorch
  // 1.13): below a second it gives up at once.
  if (collective_timeout < absl::Seconds(1) || collective_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedOptions.collective_timeout must be finite and at least 1s, got ",
                     absl::FormatDuration(collective_timeout)));
  }
  if (bucket_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedOptions.bucket_bytes must be >= 1, got ", bucket_bytes));
  }
  return absl::OkStatus();
}

absl::Status TrainerOptions::Validate() const {
  if (finetune && init_checkpoint.empty()) {
    return absl::InvalidArgumentError(
        "TrainerOptions.finetune needs TrainerOptions.init_checkpoint (the network whose head "
        "is trained)");
  }
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.num_classes must be > 0, got ", num_classes));
  }
  if (channels_last && finetune) {
    return absl::InvalidArgumentError(
        "TrainerOptions.channels_last is for images; TrainerOptions.finetune trains on features");
  }
  if (staging_buffers < 0 || staging_buffers > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerOptions.staging_buffers must be in [0, 16], got ", staging_buffers));
  }
  if (steps_in_flight < 0 || steps_in_flight > 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerOptions.steps_in_flight must be in [0, 8], got ", steps_in_flight));
  }
  if (amp != "off" && amp != "bf16" && amp != "fp16") {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.amp must be off, bf16 or fp16, got '", amp, "'"));
  }
  if (amp == "fp16" && !absl::StartsWith(device, "cuda")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerOptions.amp fp16 needs a cuda device (LibTorch autocasts to float16 on cuda "
        "only), got device '", device, "'; use bf16 on ", device));
  }
  if (amp == "fp16" && fused && models.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerOptions.amp fp16 scales the loss of all ", models.size(),
        " models of a fused array alike, so that one model's overflow would skip every model's "
        "step: use bf16 (no loss scaling) or train the models apart"));
  }
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.threads must be >= 0, got ", threads));
  }
  if (models.empty()) {
    return absl::InvalidArgumentError(
        "TrainerOptions.models must hold at least 1 model (a fused array of B >= 1 models)");
  }
  if (!fused && models.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerOptions.models holds ", models.size(),
        " models but TrainerOptions.fused is off: more than one model trains as a fused array"));
  }
  if (!(dropout >= 0 && dropout < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.dropout must be in [0, 1), got ", dropout));
  }
  if (absl::Status status = distributed.Validate(); !status.ok()) return status;
  for (int k = 0; k < num_models(); ++k) {
    const Hyperparameters& h = models[k];
    if (!(h.lr > 0) || !std::isfinite(h.lr)) return FieldError(k, "lr", "> 0", h.lr);
    if (!(h.weight_decay >= 0) || !std::isfinite(h.weight_decay)) {
      return FieldError(k, "weight_decay", ">= 0", h.weight_decay);
    }
    if (optimizer == OptimizerKind::kSgd) {
      if (!(h.momentum >= 0) || !std::isfinite(h.momentum)) {
        return FieldError(k, "momentum", ">= 0", h.momentum);
      }
    } else {
      if (!(h.beta1 >= 0 && h.beta1 < 1)) return FieldError(k, "beta1", "in [0, 1)", h.beta1);
      if (!(h.beta2 >= 0 && h.beta2 < 1)) return FieldError(k, "beta2", "in [0, 1)", h.beta2);
      if (!(h.eps > 0) || !std::isfinite(h.eps)) return FieldError(k, "eps", "> 0", h.eps);
    }
  }
  return absl::OkStatus();
}

std::string ModelCheckpointPath(const std::string& path, int k, int num_models, bool fused) {
  if (!fused && num_models == 1) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_extension =
      dot != std::string::npos && dot > 0 && (slash == std::string::npos || dot > slash + 1);
  if (!has_extension) return absl::StrCat(path, ".", k);
  return absl::StrCat(path.substr(0, dot), ".", k, path.substr(dot));
}

}  // namespace sophon

