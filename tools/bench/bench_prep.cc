// sophon-bench-prep: single-thread throughput of the full training transform
// (decode + RandomResizedCrop + flip + to-tensor + normalize) on the JPEG
// files of a directory, read into memory first so the disk is not measured.
// Compare with tools/bench/torchvision_prep.py on the same files
// (tools/bench/prep.sh runs both).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "sophon/base/cpu_time.h"
#include "sophon/base/escape.h"
#include "sophon/cli/cli.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "sophon/ops/pipeline.h"

ABSL_FLAG(std::string, dir, "", "Directory searched recursively for *.jpg / *.jpeg. Required.");
ABSL_FLAG(int, crop_size, 224, "Output side S. Default 224.");
ABSL_FLAG(int, repeat, 3, "Passes over the files (each pass is a new epoch). Default 3.");
ABSL_FLAG(int, max_files, 0, "Use at most this many files; 0 = all.");
ABSL_FLAG(int, warmup, 5, "Files processed before timing starts. Default 5.");
ABSL_FLAG(bool, checksum, false,
          "Also print a hash of every output tensor's bytes (to check that two builds give the "
          "same output). Default false.");

int main(int argc, char** argv) {
  // accepts --prep-workers and --prep_workers
  sophon::ParseProgramFlags(
      argc, argv,
      "See the README and --help for this tool's flags.");
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty() || !std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "sophon-bench-prep: --dir must name a directory of JPEG files\n");
    return 2;
  }
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string ext = absl::AsciiStrToLower(e.path().extension().string());
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  const int max_files = absl::GetFlag(FLAGS_max_files);
  if (max_files > 0 && static_cast<int>(paths.size()) > max_files) paths.resize(max_files);
  if (paths.empty()) {
    std::fprintf(stderr, "sophon-bench-prep: no JPEG files under %s\n", dir.c_str());
    return 2;
  }
  std::vector<std::string> files;
  uint64_t total_bytes = 0;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary | std::ios::ate);
    std::string bytes(static_cast<size_t>(std::max<std::streamoff>(0, in.tellg())), '\0');
    in.seekg(0);
    if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
      std::fprintf(stderr, "sophon-bench-prep: cannot read %s\n", p.c_str());
      return 2;
    }
    total_bytes += bytes.size();
    files.push_back(std::move(bytes));
  }
  sophon::PipelineOptions options;
  options.augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  std::vector<float> tensor(3 * options.augment.crop_size * options.augment.crop_size);
  int failures = 0;
  const bool checksum = absl::GetFlag(FLAGS_checksum);
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a over all output bytes
  auto run = [&](uint64_t epoch, size_t i) {
    sophon::StageData raw;
    raw.data = files[i];
    absl::Status s = sophon::FinishToTensor(std::move(raw), {0, epoch, i}, options,
                                            tensor.data());
    if (!s.ok()) {
      if (failures++ < 5) std::fprintf(stderr, "%s: %s\n", sophon::EscapeName(paths[i]).c_str(),
                   s.ToString().c_str());
    }
    if (checksum) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.data());
      for (size_t b = 0; b < tensor.size() * sizeof(float); ++b) {
        hash = (hash ^ bytes[b]) * 1099511628211ULL;
      }
    }
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) run(1000, i % files.size());
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  const absl::Time start = absl::Now();
  const double cpu0 = sophon::ThreadCpuSeconds();
  for (int r = 0; r < repeat; ++r) {
    for (size_t i = 0; i < files.size(); ++i) run(r, i);
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = sophon::ThreadCpuSeconds() - cpu0;
  const double images = static_cast<double>(repeat) * files.size();
  std::printf("files %zu (mean %.1f KB), passes %d, failures %d\n", files.size(),
              total_bytes / 1e3 / files.size(), repeat, failures);
  std::printf("sophon prep: %.1f images/s wall, %.2f ms CPU per image\n", images / wall,
              1e3 * cpu / images);
  if (checksum) std::printf("checksum %016llx\n", static_cast<unsigned long long>(hash));
  std::printf("RESULT images_per_s=%.3f files=%zu\n", images / wall, files.size());
  return failures ? 1 : 0;
}
