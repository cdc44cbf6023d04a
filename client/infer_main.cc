// sophon-infer: offline inference of a trained classifier over a dataset:
// the whole model on the storage node (--mode=predictionsoff), its backbone
// there and its head here (featuresoff), everything here from samples sent at
// an earlier stage, or per sample (smartoff); or locally over --data.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli/job_flags.h"
#include "client/job/job.h"
#include "client/train/inference.h"
#include "server/storage_server.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/cli/log_level.h"
#include "sophon/model/backbone.h"
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
ABSL_FLAG(std::string, data, "",
          "Run locally over this ImageFolder dataset instead of a storage server (an in-process "
          "server on loopback). Give this, --server or --servers-file.");
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
ABSL_FLAG(int, eval_resize, 0,
          "The side the shorter side is resized to before the centre crop; 0 = round(crop size x "
          "256 / 224). Default 0.");
ABSL_FLAG(int, batch_size, 64, "Samples per batch. Default 64.");
ABSL_FLAG(int, prep_workers, 2, "With --data: the in-process server's prep workers. Default 2.");
ABSL_FLAG(int, torch_threads, 0, "LibTorch intra-op threads; 0 = LibTorch's default. Default 0.");
ABSL_FLAG(bool, progress, true, "A progress line every 5 s. Default true.");

namespace {

int Fail(const absl::Status& status) {
  return sophon::FailProgram("sophon-infer", status, sophon::JobFlagNames());
}

// --mode=auto: the furthest stage every server prepares for this model.
std::string AutoMode(const sophon::ServerSet& servers, const sophon::Backbone* model) {
  sophon::Stage all = sophon::kLastStage;
  for (int i = 0; i < servers.size(); ++i) {
    all = std::min(all, sophon::ServedStage(servers.client(i)->manifest(), model));
  }
  return all == sophon::Stage::kPredictions ? "predictionsoff"
         : all == sophon::Stage::kFeatures  ? "featuresoff"
                                            : "nooff";
}

// --data: an in-process storage server on loopback.
absl::StatusOr<std::unique_ptr<sophon::StorageServer>> StartLocalServer(const std::string& data,
                                                                         bool lenient_jpeg) {
  sophon::StorageServerOptions options;
  options.data_dir = data;
  options.host = "127.0.0.1";
  options.port = 0;
  options.stats_interval = absl::ZeroDuration();
  options.service.prep_workers = absl::GetFlag(FLAGS_prep_workers);
  options.service.limits.lenient = lenient_jpeg;
  absl::StatusOr<std::unique_ptr<sophon::StorageServer>> started =
      sophon::StorageServer::Start(options);
  if (!started.ok()) return sophon::FlagError("--data", started.status());
  return started;
}

// The job's options from the flags; its mode and model are set once the
// servers are known. `local`: the servers are --data's, set by the caller.
absl::StatusOr<sophon::JobSpec> JobSpecFromFlags(bool local) {
  sophon::JobSpec spec;
  if (!local) {
    absl::StatusOr<sophon::ServersSpec> servers = sophon::ServersSpecFromFlags("");
    if (!servers.ok()) return servers.status();
    spec.servers = *std::move(servers);
  }
  sophon::LoaderOptions& loader = spec.loader;
  sophon::LoaderFlagsInto(&loader);
  loader.batch_size = absl::GetFlag(FLAGS_batch_size);
  loader.shuffle = false;
  loader.on_bad_sample = sophon::BadSamplePolicy::kSkip;
  if (absl::Status s =
          sophon::SetAugmentMode("none", absl::GetFlag(FLAGS_eval_resize), &loader.pipeline.augment);
      !s.ok()) {
    return sophon::FlagError("--eval-resize", s);
  }
  // The job ends at PREDICTIONS: the same ops (the head on fp16-rounded
  // features) wherever each sample's split point lies, so the predictions
  // do not depend on --mode.
  loader.target = sophon::Stage::kPredictions;
  absl::StatusOr<sophon::LocalCacheOptions> cache = sophon::LocalCacheFromFlags();
  if (!cache.ok()) return cache.status();
  spec.cache = *cache;
  if (absl::Status s = sophon::SmartoffFlagsInto(&spec.smartoff); !s.ok()) return s;
  // Nothing consumes the batches but the CSV writer: no step time.
  spec.smartoff.gpu_batch_seconds = 0;
  // The transport and the cache are checked now, before the model is loaded
  // (Job::Connect checks the whole spec once the model is in it).
  if (!local) {
    if (absl::Status s = spec.servers.Validate(); !s.ok()) return s;
  }
  if (absl::Status s = spec.cache.Validate(); !s.ok()) return s;
  return spec;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ConfigureAllocatorForLargeBuffers();
  sophon::ParseProgramFlags(
      argc, argv,
      "Sophon offline inference.\nUsage: sophon-infer --model=CKPT (--server=HOST:PORT | "
      "--servers-file=FILE | --data=DIR) [--out=predictions.csv] [--mode=auto] [--tls-ca=CA.pem "
      "--auth-token-file=TOKEN]");
  if (absl::Status s = sophon::ApplyLogLevelFlag(); !s.ok()) return Fail(s);
  const std::string data = absl::GetFlag(FLAGS_data);
  if (sophon::ServerFlagsGiven() == !data.empty()) {
    return Fail(absl::InvalidArgumentError("give one of --server (or --servers-file) and --data"));
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    return Fail(absl::InvalidArgumentError("--model is required"));
  }
  if (absl::GetFlag(FLAGS_top_k) < 1 || absl::GetFlag(FLAGS_top_k) > sophon::kMaxTopK) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--top-k must be in [1, ", sophon::kMaxTopK, "], got ", absl::GetFlag(FLAGS_top_k))));
  }
  absl::StatusOr<sophon::JobSpec> spec = JobSpecFromFlags(!data.empty());
  if (!spec.ok()) return Fail(spec.status());
  sophon::BackboneOptions backbone_options;
  backbone_options.checkpoint = absl::GetFlag(FLAGS_model);
  backbone_options.threads = absl::GetFlag(FLAGS_torch_threads);
  absl::StatusOr<std::unique_ptr<sophon::Backbone>> model =
      sophon::Backbone::Load(backbone_options);
  if (!model.ok()) return Fail(sophon::FlagError("--model", model.status()));

  std::unique_ptr<sophon::StorageServer> local;
  if (!data.empty()) {
    absl::StatusOr<std::unique_ptr<sophon::StorageServer>> started =
        StartLocalServer(data, spec->loader.pipeline.limits.lenient);
    if (!started.ok()) return Fail(started.status());
    local = *std::move(started);
    spec->servers.addresses = {local->address()};
  }
  spec->loader.pipeline.backbone = model->get();
  spec->loader.pipeline.top_k = std::min(absl::GetFlag(FLAGS_top_k), (*model)->num_classes());
  absl::StatusOr<std::unique_ptr<sophon::Job>> job = sophon::Job::Connect(*std::move(spec));
  if (!job.ok()) return Fail(job.status());
  sophon::Job& j = **job;

  std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "auto") mode = AutoMode(*j.servers(), model->get());
  absl::StatusOr<sophon::PlannerKind> kind = sophon::ParseMode(mode, sophon::PlannerKind::kOptimal);
  if (!kind.ok()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--mode must be auto, smartoff, predictionsoff, featuresoff, nooff, "
                     "resizeoff or alloff, got '", mode, "'")));
  }
  j.spec().mode = *kind;
  if (absl::Status s = j.Plan(); !s.ok()) return Fail(s);
  if (absl::Status s = j.Start(); !s.ok()) return Fail(s);

  const sophon::LoaderOptions& loader = j.spec().loader;
  spdlog::info("inference with {} ({} classes, top {}) over '{}' ({} samples), mode {}, crop {}",
               (*model)->arch(), (*model)->num_classes(), loader.pipeline.top_k,
               j.servers()->manifest().name(), j.servers()->manifest().num_samples(),
               j.policy()->name(), loader.pipeline.augment.crop_size);
  sophon::InferenceOptions options;
  options.out = absl::GetFlag(FLAGS_out);
  options.progress = absl::GetFlag(FLAGS_progress);
  options.model_classes = (*model)->num_classes();
  options.top_k = loader.pipeline.top_k;
  absl::StatusOr<sophon::InferenceReport> report =
      sophon::RunInference(j.loader(), *j.servers(), options);
  if (!report.ok()) return Fail(report.status());
  spdlog::info("{}", sophon::FormatInferenceReport(*report));
  if (!options.out.empty()) spdlog::info("predictions written to {}", options.out);
  return 0;
}
