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
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader/loader.h"
#include "client/loader/server_list.h"
#include "client/loader/server_set.h"
#include "client/offload/fixed_policy.h"
#include "sophon/base/status_macros.h"
#include "sophon/cli/cli.h"
#include "sophon/planning/planner.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Storage server(s), HOST:PORT[,HOST:PORT...].");
ABSL_FLAG(std::string, mode, "nooff", "nooff, resizeoff or alloff. Default nooff.");
ABSL_FLAG(int, batch_size, 256, "Samples per batch. Default 256.");
ABSL_FLAG(int, crop_size, 224, "Crop size S. Default 224.");
ABSL_FLAG(int, workers, 2, "Local prep threads. Default 2.");
ABSL_FLAG(int, prefetch_batches, 3, "Batches requested ahead. Default 3.");
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
  sophon::LoaderOptions options;
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.pipeline.augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output == "uint8") {
    options.target = sophon::Stage::kFlipped;
  } else if (output != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--output must be float32 or uint8, got '", output, "'"));
  }
  std::vector<sophon::ClientOptions> clients;
  ASSIGN_OR_RETURN(const std::vector<std::string> addresses,
                   sophon::ParseServerList(absl::GetFlag(FLAGS_server)));
  for (const std::string& address : addresses) {
    sophon::ClientOptions c;
    c.address = address;
    clients.push_back(std::move(c));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<sophon::ServerSet> servers, sophon::ServerSet::Connect(clients));
  sophon::FixedPolicy policy(sophon::FixedKindStage(mode), sophon::ModeName(mode));
  ASSIGN_OR_RETURN(std::unique_ptr<sophon::Loader> loader,
                   sophon::Loader::Create(servers.get(), options, &policy));
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
  sophon::InitUsage(
      "The C++ loader alone against running storage servers.\n"
      "Usage: sophon-bench-loader --server=HOST:PORT [--mode=nooff] [--batch-size=256] "
      "[--epochs=1]");
  sophon::ArgvHolder args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  if (absl::Status s = Run(); !s.ok()) {
    return sophon::FailProgram("sophon-bench-loader", s,
                               {{"LoaderOptions.batch_size", "--batch-size"},
                                {"LoaderOptions.workers", "--workers"},
                                {"LoaderOptions.prefetch_batches", "--prefetch-batches"}});
  }
  return 0;
}
