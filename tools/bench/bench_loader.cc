// sophon-bench-loader: the C++ loader alone against running storage servers,
// consuming batches as fast as it delivers them (no training), one fixed mode.
// The peer of the Python loader in tools/bench/python_loader.py: the same
// options give the same work, so their images/s compare the bindings' cost.
// Prints one line per epoch and a final JSON line.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/job_flags.h"
#include "client/job/job.h"
#include "sophon/base/status_macros.h"
#include "sophon/cli/cli.h"
#include "sophon/cli/log_level.h"
#include "sophon/planning/planner.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, mode, "nooff", "nooff, resizeoff or alloff. Default nooff.");
ABSL_FLAG(int, batch_size, 256, "Samples per batch. Default 256.");
ABSL_FLAG(int, epochs, 1, "Epochs (0, 1, ...). Default 1.");
ABSL_FLAG(uint64_t, seed, 0, "Shuffle and augmentation seed. Default 0.");
ABSL_FLAG(std::string, output, "float32",
          "float32 (normalised NCHW batches) or uint8 (NHWC, flipped). Default float32.");

namespace {

absl::Status Run() {
  ASSIGN_OR_RETURN(const sophon::PlannerKind mode,
                   sophon::ParseMode(absl::GetFlag(FLAGS_mode), sophon::PlannerKind::kOptimal));
  if (!sophon::IsFixedKind(mode)) {
    return absl::InvalidArgumentError("--mode must be nooff, resizeoff or alloff");
  }
  sophon::JobSpec spec;
  spec.mode = mode;
  ASSIGN_OR_RETURN(spec.servers, sophon::ServersSpecFromFlags("127.0.0.1:50051"));
  sophon::LoaderOptions& options = spec.loader;
  sophon::LoaderFlagsInto(&options);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.seed = absl::GetFlag(FLAGS_seed);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output == "uint8") {
    options.target = sophon::Stage::kFlipped;
  } else if (output != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--output must be float32 or uint8, got '", output, "'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<sophon::Job> job, sophon::Job::Assemble(std::move(spec)));
  sophon::Loader* const loader = job->loader();
  std::string json = "[";
  for (int epoch = 0; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(loader->StartEpoch(epoch));
    sophon::Batch batch;
    int64_t images = 0;
    while (true) {
      ASSIGN_OR_RETURN(const bool more, loader->Next(&batch));
      if (!more) break;
      images += batch.n;
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("epoch %d: %lld images in %.2f s, %.1f images/s\n", epoch,
                static_cast<long long>(images), seconds, images / seconds);
    absl::StrAppend(&json, epoch > 0 ? ", " : "",
                    absl::StrFormat("{\"epoch\": %d, \"images\": %lld, \"seconds\": %.4f}", epoch,
                                    static_cast<long long>(images), seconds));
  }
  std::printf("%s]\n", json.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(
      argc, argv,
      "The C++ loader alone against running storage servers.\n"
      "Usage: sophon-bench-loader --server=HOST:PORT [--mode=nooff] [--batch-size=256] "
      "[--epochs=1]");
  absl::Status s = sophon::ApplyLogLevelFlag();
  if (s.ok()) s = Run();
  if (!s.ok()) {
    sophon::FlagNames names = sophon::JobFlagNames();
    names.push_back({"LoaderOptions.batch_size", "--batch-size"});
    return sophon::FailProgram("sophon-bench-loader", s, names);
  }
  return 0;
}
