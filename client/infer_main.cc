// sophon-infer: offline inference of a trained classifier over a dataset:
// the whole model on the storage node (--mode=predictionsoff), its backbone
// there and its head here (featuresoff), everything here from samples sent at
// an earlier stage, or per sample (smartoff); or locally over --data.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "client/loader/loader.h"
#include "client/loader/server_list.h"
#include "client/loader/server_set.h"
#include "absl/strings/numbers.h"
#include "client/offload/cluster_policy.h"
#include "client/offload/fixed_policy.h"
#include "sophon/model/backbone.h"
#include "client/train/inference.h"
#include "server/storage_server.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/planning/planner.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, "",
          "Checkpoint written by sophon-train --save: the classifier to run. Required.");
ABSL_FLAG(std::string, out, "predictions.csv",
          "CSV of predictions, one line per sample: id,path,label,class, then pred_k,class_k,"
          "prob_k for k = 1..--top-k (class_k is empty when the model's class count differs "
          "from the dataset's). Empty: none. Default predictions.csv.");
ABSL_FLAG(int, top_k, 5,
          "Classes per sample, most probable first; over the model's class count: every class. "
          "Default 5.");
ABSL_FLAG(std::string, server, "",
          "Storage server address(es), comma-separated (several: shards or replicas, as "
          "sophon-train). Give this or --data.");
ABSL_FLAG(std::string, data, "",
          "Run locally over this ImageFolder dataset instead of a storage server (an in-process "
          "server on loopback). Give this or --server.");
ABSL_FLAG(std::string, mode, "auto",
          "Where the model runs: predictionsoff (all of it on the storage node, which must have "
          "been started with --backbone=<this checkpoint>; only the top-k classes cross the "
          "network), featuresoff (the backbone there, fp16 features cross the network, the head "
          "here), nooff, resizeoff or alloff (all of it here, from the file, the crop or the "
          "tensor), smartoff (per sample, from a profile and the cost model, as sophon-train), "
          "or auto: predictionsoff when every server has this model, featuresoff when every "
          "server has its backbone (another head), else nooff. A server without the model "
          "(or with another head) gets samples at the furthest stage it can prepare. The "
          "predictions are the same in every mode. Default auto.");
ABSL_FLAG(std::string, profile_folder, "",
          "--mode=smartoff: where this dataset's profile is looked up and, without one, written. "
          "Default profiles/<dataset>/.");
ABSL_FLAG(std::string, net_bw, "auto",
          "--mode=smartoff: network bandwidth in Mbit/s, or auto to measure it. Default auto.");
ABSL_FLAG(int, crop_size, 224, "Side of the centre crop the model sees. Default 224.");
ABSL_FLAG(int, eval_resize, 0,
          "The side the shorter side is resized to before the centre crop; 0 = round(crop size x "
          "256 / 224). Default 0.");
ABSL_FLAG(int, batch_size, 64, "Samples per batch. Default 64.");
ABSL_FLAG(int, workers, 2, "Local threads that finish each sample's remaining ops. Default 2.");
ABSL_FLAG(int, prefetch_batches, 3, "Batches requested ahead. Default 3.");
ABSL_FLAG(int, prep_workers, 2, "With --data: the in-process server's prep workers. Default 2.");
ABSL_FLAG(int, torch_threads, 0, "LibTorch intra-op threads; 0 = LibTorch's default. Default 0.");
ABSL_FLAG(bool, lenient_jpeg, false,
          "Accept JPEGs with corrupt-data warnings (must match the server's). Default false.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to keep retrying a server. Default 30s.");
ABSL_FLAG(bool, progress, true, "A progress line every 5 s. Default true.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error. Default info.");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sophon-infer: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ConfigureAllocatorForLargeBuffers();
  sophon::InitUsage(
      "Sophon offline inference.\nUsage: sophon-infer --model=CKPT (--server=HOST:PORT | "
      "--data=DIR) [--out=predictions.csv] [--mode=auto]");
  sophon::ArgvHolder args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  const std::string server_flag = absl::GetFlag(FLAGS_server);
  const std::string data = absl::GetFlag(FLAGS_data);
  if (server_flag.empty() == data.empty()) {
    return Fail(absl::InvalidArgumentError("give one of --server and --data"));
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    return Fail(absl::InvalidArgumentError("--model is required"));
  }

  if (absl::GetFlag(FLAGS_top_k) < 1 || absl::GetFlag(FLAGS_top_k) > sophon::kMaxTopK) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--top-k must be in [1, ", sophon::kMaxTopK, "], got ", absl::GetFlag(FLAGS_top_k))));
  }
  sophon::BackboneOptions backbone_options;
  backbone_options.checkpoint = absl::GetFlag(FLAGS_model);
  backbone_options.threads = absl::GetFlag(FLAGS_torch_threads);
  absl::StatusOr<std::unique_ptr<sophon::Backbone>> backbone =
      sophon::Backbone::Load(backbone_options);
  if (!backbone.ok()) return Fail(sophon::FlagError("--model", backbone.status()));

  // --data: an in-process storage server on loopback.
  std::unique_ptr<sophon::StorageServer> local;
  std::vector<std::string> addresses;
  if (!data.empty()) {
    sophon::StorageServerOptions options;
    options.data_dir = data;
    options.host = "127.0.0.1";
    options.port = 0;
    options.stats_interval = absl::ZeroDuration();
    options.service.prep_workers = absl::GetFlag(FLAGS_prep_workers);
    options.service.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
    absl::StatusOr<std::unique_ptr<sophon::StorageServer>> started =
        sophon::StorageServer::Start(options);
    if (!started.ok()) return Fail(sophon::FlagError("--data", started.status()));
    local = *std::move(started);
    addresses.push_back(local->address());
  } else {
    absl::StatusOr<std::vector<std::string>> parsed = sophon::ParseServerList(server_flag);
    if (!parsed.ok()) return Fail(sophon::FlagError("--server", parsed.status()));
    addresses = *std::move(parsed);
  }
  std::vector<sophon::ClientOptions> clients;
  for (const std::string& address : addresses) {
    sophon::ClientOptions c;
    c.address = address;
    c.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
    clients.push_back(c);
  }
  absl::StatusOr<std::unique_ptr<sophon::ServerSet>> servers = sophon::ServerSet::Connect(clients);
  if (!servers.ok()) return Fail(servers.status());

  std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "auto") {
    // The furthest stage every server prepares for this model.
    sophon::Stage all = sophon::kLastStage;
    for (int i = 0; i < (*servers)->size(); ++i) {
      all = std::min(all, sophon::ServedStage((*servers)->client(i)->manifest(), backbone->get()));
    }
    mode = all == sophon::Stage::kPredictions ? "predictionsoff"
           : all == sophon::Stage::kFeatures  ? "featuresoff"
                                              : "nooff";
  }
  absl::StatusOr<sophon::PlannerKind> kind = sophon::ParseMode(mode, sophon::PlannerKind::kOptimal);
  if (!kind.ok()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--mode must be auto, smartoff, predictionsoff, featuresoff, nooff, "
                     "resizeoff or alloff, got '", mode, "'")));
  }

  sophon::LoaderOptions loader_options;
  loader_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  loader_options.workers = absl::GetFlag(FLAGS_workers);
  loader_options.prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  loader_options.shuffle = false;
  loader_options.on_bad_sample = sophon::BadSamplePolicy::kSkip;
  loader_options.pipeline.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
  loader_options.pipeline.augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  if (absl::Status s = sophon::SetAugmentMode("none", absl::GetFlag(FLAGS_eval_resize),
                                              &loader_options.pipeline.augment);
      !s.ok()) {
    return Fail(sophon::FlagError("--eval-resize", s));
  }
  // The job ends at PREDICTIONS: the same ops (the head on fp16-rounded
  // features) wherever each sample's split point lies, so the predictions
  // do not depend on --mode.
  loader_options.target = sophon::Stage::kPredictions;
  loader_options.pipeline.backbone = backbone->get();
  loader_options.pipeline.top_k = std::min(absl::GetFlag(FLAGS_top_k), (*backbone)->num_classes());
  std::unique_ptr<sophon::OffloadPolicy> policy;
  if (sophon::IsFixedKind(*kind)) {
    policy = std::make_unique<sophon::FixedPolicy>(sophon::FixedKindStage(*kind),
                                                   sophon::ModeName(*kind));
  } else {
    sophon::SmartoffOptions smartoff;
    smartoff.planner = *kind;
    smartoff.profile_folder = absl::GetFlag(FLAGS_profile_folder);
    // Nothing consumes the batches but the CSV writer: no step time.
    smartoff.gpu_batch_seconds = 0;
    if (const std::string bw = absl::GetFlag(FLAGS_net_bw); bw != "auto") {
      if (!absl::SimpleAtod(bw, &smartoff.net_bw_mbit) || smartoff.net_bw_mbit <= 0) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--net-bw must be a positive number of Mbit/s or auto, got '", bw, "'")));
      }
    }
    absl::StatusOr<std::unique_ptr<sophon::OffloadPolicy>> created = sophon::CreateSmartoffFor(
        servers->get(), loader_options, smartoff, /*ingress_mbit=*/-1);
    if (!created.ok()) return Fail(created.status());
    policy = *std::move(created);
  }
  absl::StatusOr<std::unique_ptr<sophon::Loader>> loader =
      sophon::Loader::Create(servers->get(), loader_options, policy.get());
  if (!loader.ok()) return Fail(loader.status());

  spdlog::info("inference with {} ({} classes, top {}) over '{}' ({} samples), mode {}, crop {}",
               (*backbone)->arch(), (*backbone)->num_classes(), loader_options.pipeline.top_k,
               (*servers)->manifest().name(), (*servers)->manifest().num_samples(),
               policy->name(), loader_options.pipeline.augment.crop_size);
  sophon::InferenceOptions options;
  options.out = absl::GetFlag(FLAGS_out);
  options.progress = absl::GetFlag(FLAGS_progress);
  options.model_classes = (*backbone)->num_classes();
  options.top_k = loader_options.pipeline.top_k;
  absl::StatusOr<sophon::InferenceReport> report =
      sophon::RunInference(loader->get(), **servers, options);
  if (!report.ok()) return Fail(report.status());
  spdlog::info("{}", sophon::FormatInferenceReport(*report));
  if (!options.out.empty()) spdlog::info("predictions written to {}", options.out);
  return 0;
}
