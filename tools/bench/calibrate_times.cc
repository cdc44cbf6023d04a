// sophon-calibrate-times: measures every op of Sophon's pipeline on the JPEGs
// of an ImageFolder dataset (one thread, the files' CPU time only), fits the
// times model of sophon/planning/times_model.h to the measurements and prints its
// coefficients, ready to paste into DefaultTimesModel(). With --profile-out
// it also writes the measured profile (sample_profile.csv), which
// sophon-plan --times-profile can carry over to a sizes-only profile.
//
//   tools/make-dataset --out=/tmp/oi --n=400 --profile=openimages
//   build/sophon-calibrate-times --data=/tmp/oi --epochs=3
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/data/image_folder.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/profiling/profiler.h"
#include "sophon/planning/times_model.h"

ABSL_FLAG(std::string, data, "", "ImageFolder dataset root (DIR/CLASS/*.jpg). Required.");
ABSL_FLAG(int, crop_size, 224, "Output side S. Default 224.");
ABSL_FLAG(int, epochs, 3,
          "Passes over the files; op times are averaged over them (crops differ per pass). "
          "Default 3.");
ABSL_FLAG(int64_t, max_samples, 0, "Profile only the first N samples; 0 = all. Default 0.");
ABSL_FLAG(std::string, profile_out, "",
          "Folder to write the measured profile to (sample_profile.csv). Default: none.");

using sophon::Stage;

namespace {

// Fraction of the variance of the measured decode times that the model explains.
double DecodeRSquared(const sophon::DatasetProfile& p, const sophon::TimesModel& m) {
  double mean = 0;
  for (const auto& s : p.samples) mean += s.client[sophon::Op::kDecodeCrop];
  mean /= p.samples.size();
  double ss_res = 0, ss_tot = 0;
  for (const auto& s : p.samples) {
    const double pred =
        sophon::PredictOpTimes(m, s.bytes[Stage::kRaw], s.source_pixels, p.crop_size)[sophon::Op::kDecodeCrop];
    ss_res += (s.client[sophon::Op::kDecodeCrop] - pred) * (s.client[sophon::Op::kDecodeCrop] - pred);
    ss_tot += (s.client[sophon::Op::kDecodeCrop] - mean) * (s.client[sophon::Op::kDecodeCrop] - mean);
  }
  return ss_tot > 0 ? 1 - ss_res / ss_tot : 0;
}

void PrintReport(const sophon::DatasetProfile& p, const sophon::TimesModel& m) {
  double raw = 0, pixels = 0, decode = 0, flip = 0, tensor = 0;
  for (const auto& s : p.samples) {
    raw += s.bytes[Stage::kRaw];
    pixels += s.source_pixels;
    decode += s.client[sophon::Op::kDecodeCrop];
    flip += s.client[sophon::Op::kFlip];
    tensor += s.client[sophon::Op::kTensor];
  }
  const double n = p.samples.size();
  std::printf("samples %zu, mean raw %.0f B, mean source %.0f px, S = %d\n", p.samples.size(),
              raw / n, pixels / n, p.crop_size);
  std::printf("measured mean CPU ms: decode_crop %.4f, flip %.4f, tensor %.4f\n", 1e3 * decode / n,
              1e3 * flip / n, 1e3 * tensor / n);
  std::printf("decode_crop fit R^2 = %.3f\n", DecodeRSquared(p, m));
  std::printf("  m.ops[sophon::Op::kDecodeCrop].s_per_raw_byte = %.4e;\n", m.ops[sophon::Op::kDecodeCrop].s_per_raw_byte);
  std::printf("  m.ops[sophon::Op::kDecodeCrop].s_per_source_pixel = %.4e;\n", m.ops[sophon::Op::kDecodeCrop].s_per_source_pixel);
  std::printf("  m.ops[sophon::Op::kDecodeCrop].s_fixed = %.4e;\n", m.ops[sophon::Op::kDecodeCrop].s_fixed);
  std::printf("  m.ops[sophon::Op::kFlip].s_per_output_pixel = %.4e;\n", m.ops[sophon::Op::kFlip].s_per_output_pixel);
  std::printf("  m.ops[sophon::Op::kTensor].s_per_output_pixel = %.4e;\n", m.ops[sophon::Op::kTensor].s_per_output_pixel);
}

}  // namespace

int main(int argc, char** argv) {
  // As sophon-server and sophon-train do: without it every sample's large
  // buffers are fresh pages, whose faults (expensive under a hypervisor)
  // would be measured as op time.
  sophon::ConfigureAllocatorForLargeBuffers();
  // accepts --crop-size and --crop_size
  sophon::ParseProgramFlags(
      argc, argv,
      "Fits Sophon's op-times model to this machine.\n"
      "Usage: sophon-calibrate-times --data=DIR [--epochs=3] [--profile-out=DIR]");

  absl::StatusOr<std::unique_ptr<sophon::ImageFolderSource>> dataset =
      sophon::ImageFolderSource::Open(absl::GetFlag(FLAGS_data));
  if (!dataset.ok()) {
    std::fprintf(stderr, "sophon-calibrate-times: %s\n", dataset.status().ToString().c_str());
    return 2;
  }
  sophon::ProfilerOptions options;
  options.pipeline.augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.max_samples = absl::GetFlag(FLAGS_max_samples);
  absl::StatusOr<sophon::DatasetProfile> profile = sophon::MeasureProfile(**dataset, options);
  if (!profile.ok()) {
    std::fprintf(stderr, "sophon-calibrate-times: %s\n", profile.status().ToString().c_str());
    return 1;
  }
  if (const std::string out = absl::GetFlag(FLAGS_profile_out); !out.empty()) {
    if (absl::Status s = sophon::SaveProfileFolder(*profile, out); !s.ok()) {
      std::fprintf(stderr, "sophon-calibrate-times: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  absl::StatusOr<sophon::TimesModel> model = sophon::FitTimesModel(*profile);
  if (!model.ok()) {
    std::fprintf(stderr, "sophon-calibrate-times: %s\n", model.status().ToString().c_str());
    return 1;
  }
  PrintReport(*profile, *model);
  return 0;
}
