// sophon-profile-gpu: measures the training step of sophon-train's models on
// a real device (LibTorch, cpu or cuda) with synthetic in-memory batches and
// writes rows in Sophon's GPU profile format (profiles/gpu/README.md), so that
// a user with one GPU can emulate it elsewhere with --device=emulate.
//
// Per (model, batch size): W warm-up steps, then N timed steps of
// Trainer::Step (copy + forward + backward + optimizer step; it ends with a
// device sync when it reads the loss). With --transfer=uint8 the batch is
// uint8 crops and the step includes their flip and normalisation on the
// device. On cuda the host-to-device copy of the
// batch (pageable memory, as the trainer copies it) is timed on its own, N
// times, and compute = median step - median copy. On cpu copy = 0.
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/emulation/gpu_profile.h"
#include "spdlog/spdlog.h"
#include "sophon/emulation/synthetic_batch.h"
#include "client/train/trainer.h"

ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or cuda:N. Default cpu.");
ABSL_FLAG(std::string, gpu_type, "",
          "Name written in the gpu_type column (e.g. v100, a100, h100). Default: 'cpu' on cpu; "
          "required on cuda.");
ABSL_FLAG(sophon::CommaList, models, sophon::CommaList({"alexnet", "resnet18", "resnet50"}),
          "Comma-separated models. Default alexnet,resnet18,resnet50.");
ABSL_FLAG(sophon::CommaList, batch_sizes, sophon::CommaList({"64", "128", "256"}),
          "Comma-separated batch sizes. Default 64,128,256.");
ABSL_FLAG(sophon::CommaList, fused_models, sophon::CommaList(),
          "Also measure each model as fused arrays of these sizes B (sophon-train "
          "--fused-models=B), written as model '<model>x<B>' (the row sophon-train "
          "--device=emulate --fused-models=B looks for). Default none.");
ABSL_FLAG(int, crop_size, 224, "Image side S (batches are 3 x S x S). Default 224.");
ABSL_FLAG(std::string, transfer, "auto",
          "What a batch crosses to the device as, as sophon-train --transfer: float32 (the "
          "normalised tensors) or uint8 (the crops; the step then includes their flip and "
          "normalisation on the device, so a profile measured with it is the GPU cost of a "
          "--transfer=uint8 run). auto: uint8 on cuda, float32 on cpu. Default auto.");
ABSL_FLAG(std::string, amp, "off",
          "Mixed precision of the measured step, as sophon-train --amp: off, bf16 (cpu or cuda) "
          "or fp16 (cuda only, with loss scaling; not with --fused-models). Default off.");
ABSL_FLAG(bool, channels_last, false,
          "Measure the step in channels-last memory order, as sophon-train --channels-last. "
          "Default false.");
ABSL_FLAG(int, num_classes, 1000, "Classes of the model's last layer. Default 1000.");
ABSL_FLAG(int, warmup, 3, "Untimed steps before measuring. Default 3.");
ABSL_FLAG(int, steps, 10, "Timed steps; the median is written. Default 10.");
ABSL_FLAG(int, torch_threads, 0, "LibTorch intra-op threads on cpu; 0 = LibTorch's default.");
ABSL_FLAG(std::string, out, "", "Write the profile here (with header); default stdout.");

namespace {

using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sophon-profile-gpu: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string TodayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// Median seconds of a pageable host-to-device copy of the batch's images
// (float32) or crops (uint8).
double MeasureCopySeconds(const sophon::Batch& batch, const torch::Device& device, int warmup,
                          int steps) {
  torch::Tensor host =
      batch.stage == sophon::Stage::kCropped
          ? torch::from_blob(const_cast<uint8_t*>(batch.pixels.data()),
                             {batch.n, batch.h, batch.w, batch.c}, torch::kUInt8)
          : torch::from_blob(const_cast<float*>(batch.images.data()),
                             {batch.n, batch.c, batch.h, batch.w}, torch::kFloat32);
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    torch::cuda::synchronize(device.index());
    const Clock::time_point start = Clock::now();
    torch::Tensor on_device = host.to(device);
    torch::cuda::synchronize(device.index());
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= warmup) times.push_back(s);
  }
  return Median(times);
}

struct Measurement {
  double step_seconds = 0;
  double copy_seconds = 0;
};

// `fused` = 0: one ordinary model; B >= 1: a fused array of B.
absl::StatusOr<Measurement> Measure(const std::string& model, int fused, int batch_size,
                                    const sophon::TrainerOptions& base, sophon::Stage input) {
  sophon::TrainerOptions options = base;
  options.arch = model;
  options.fused = fused > 0;
  options.models.assign(static_cast<size_t>(std::max(1, fused)), sophon::Hyperparameters{});
  absl::StatusOr<std::unique_ptr<sophon::Trainer>> trainer = sophon::Trainer::Create(options);
  if (!trainer.ok()) return trainer.status();
  const sophon::Batch batch = sophon::MakeSyntheticBatch(
      batch_size, absl::GetFlag(FLAGS_crop_size), options.num_classes, /*seed=*/1, input);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<sophon::StepResult> step = (*trainer)->Step(batch);
    if (!step.ok()) {
      return absl::Status(step.status().code(), absl::StrCat(model, " batch ", batch_size, ": ",
                                                             step.status().message()));
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= warmup) times.push_back(s);
  }
  Measurement m;
  m.step_seconds = Median(times);
  if (options.device != "cpu") {
    try {
      m.copy_seconds = MeasureCopySeconds(batch, torch::Device(options.device), warmup, steps);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("timing the copy of ", model, " batch ", batch_size, " failed: ", e.what()));
    }
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  // As sophon-train runs: without it every large activation is a fresh mmap,
  // faulted in page by page at each step (fused arrays: 2x the step time).
  sophon::ConfigureAllocatorForLargeBuffers();
  sophon::ParseProgramFlags(
      argc, argv,
      "Measures training-step times on a real device and writes a Sophon GPU profile.\n"
      "Usage: sophon-profile-gpu --device=cuda --gpu-type=a100 [--models=alexnet,resnet50] "
      "[--batch-sizes=64,128,256] [--out=profiles/gpu/a100.csv]");

  sophon::TrainerOptions base;
  base.device = absl::GetFlag(FLAGS_device);
  base.num_classes = absl::GetFlag(FLAGS_num_classes);
  base.threads = absl::GetFlag(FLAGS_torch_threads);
  base.amp = absl::GetFlag(FLAGS_amp);
  base.channels_last = absl::GetFlag(FLAGS_channels_last);
  if (absl::Status valid = base.Validate(); !valid.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--amp/--channels-last/--device: ",
                                                        valid.message())));
  }
  std::string gpu_type = absl::GetFlag(FLAGS_gpu_type);
  if (gpu_type.empty()) {
    if (base.device != "cpu") {
      return Fail(absl::InvalidArgumentError("--gpu-type is required with --device=" + base.device +
                                             " (e.g. --gpu-type=a100)"));
    }
    gpu_type = "cpu";
  }
  absl::StatusOr<std::vector<int>> batch_sizes = absl::GetFlag(FLAGS_batch_sizes).PositiveInts("--batch-sizes");
  if (!batch_sizes.ok()) return Fail(batch_sizes.status());
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int crop = absl::GetFlag(FLAGS_crop_size);
  if (warmup < 0 || steps < 1 || crop < 1) {
    return Fail(absl::InvalidArgumentError("need --warmup >= 0, --steps >= 1, --crop-size >= 1"));
  }

  const absl::StatusOr<sophon::Stage> stage =
      sophon::TransferStage(absl::GetFlag(FLAGS_transfer), base.device);
  if (!stage.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--", stage.status().message())));
  }
  const sophon::Stage input = *stage;
  const std::string input_text = input == sophon::Stage::kCropped
                                     ? absl::StrCat("uint8 ", crop, "x", crop,
                                                    "x3 flipped and normalised on the device")
                                     : absl::StrCat("float32 3x", crop, "x", crop);

  std::vector<int> fused_sizes = {0};  // 0: the ordinary model
  if (!absl::GetFlag(FLAGS_fused_models).items.empty()) {
    absl::StatusOr<std::vector<int>> sizes =
        absl::GetFlag(FLAGS_fused_models).PositiveInts("--fused-models");
    if (!sizes.ok()) return Fail(sizes.status());
    fused_sizes.insert(fused_sizes.end(), sizes->begin(), sizes->end());
  }

  std::vector<sophon::GpuProfileRow> rows;
  for (const std::string& arch : absl::GetFlag(FLAGS_models).items) {
    for (int fused : fused_sizes) {
      const std::string model = fused > 0 ? absl::StrCat(arch, "x", fused) : arch;
      for (int batch_size : *batch_sizes) {
        absl::StatusOr<Measurement> m = Measure(arch, fused, batch_size, base, input);
        if (!m.ok()) return Fail(m.status());
        sophon::GpuProfileRow row;
        row.gpu_type = gpu_type;
        row.model = model;
        row.batch_size = batch_size;
        row.copy_seconds = m->copy_seconds;
        row.compute_seconds = std::max(0.0, m->step_seconds - m->copy_seconds);
        row.source = absl::StrFormat(
            "measured by sophon-profile-gpu on %s (LibTorch %d.%d.%d, %s%s, input %s, %d "
            "classes, median of %d steps after %d warm-up%s), %s",
            base.device, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH,
            base.amp == "off" ? "fp32" : absl::StrCat("amp ", base.amp),
            base.channels_last ? ", channels-last" : "", input_text,
            base.num_classes, steps, warmup,
            base.device == "cpu" ? absl::StrCat(", ", torch::get_num_threads(), " threads") : "",
            TodayUtc());
        spdlog::info("{} batch {} on {}: step {:.4f}s (copy {:.4f}s), {:.1f} img/s", model,
                     batch_size, base.device, m->step_seconds, m->copy_seconds,
                     batch_size / std::max(1e-12, m->step_seconds));
        rows.push_back(row);
      }
    }
  }
  const std::string csv = sophon::FormatGpuProfileCsv(rows);
  const std::string out_path = absl::GetFlag(FLAGS_out);
  if (out_path.empty()) {
    std::fputs(csv.c_str(), stdout);
    return 0;
  }
  std::ofstream out(out_path);
  out << csv;
  if (!out) return Fail(absl::UnavailableError("cannot write --out file '" + out_path + "'"));
  spdlog::info("wrote {} rows to {}", rows.size(), out_path);
  return 0;
}
